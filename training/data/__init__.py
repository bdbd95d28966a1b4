"""data: see training/__init__.py."""
