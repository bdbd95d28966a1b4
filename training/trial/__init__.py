"""trial: see training/__init__.py."""
