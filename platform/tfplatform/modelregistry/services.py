"""Writes of the model registry."""

from pathlib import Path

from django.conf import settings

EMPTY_MODEL_CONFIG = "model_config_list {\n}\n"


def model_config_path() -> Path:
    return Path(settings.PLATFORM["MODEL_BASE_PATH"]) / "models.config"


def model_config_ensure() -> Path:
    """The model server's config file must exist before it starts, even with no models yet."""
    path = model_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(EMPTY_MODEL_CONFIG)
    return path
