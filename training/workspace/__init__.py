"""workspace: see training/__init__.py."""
