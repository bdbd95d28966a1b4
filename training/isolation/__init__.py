"""isolation: see training/__init__.py."""
