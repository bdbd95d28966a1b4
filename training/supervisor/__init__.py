"""supervisor: see training/__init__.py."""
