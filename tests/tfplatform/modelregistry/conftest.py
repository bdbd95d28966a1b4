"""Uploads of TF Serving's own test SavedModels, as a user would send them."""

import io
import zipfile
from pathlib import Path

from tests.conftest import peer_data_or_skip

HALF_PLUS_TWO = "saved_model_half_plus_two_cpu"
HALF_PLUS_THREE = "saved_model_half_plus_three"


def saved_model_zip(name: str, *, top_folder: str = "") -> io.BytesIO:
    """A zip of one of TF Serving's test SavedModels, as a user would upload it."""
    source = peer_data_or_skip() / "tf-serving-testdata" / name / "00000123"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, str(Path(top_folder) / path.relative_to(source)))
    buffer.seek(0)
    buffer.name = f"{name}.zip"
    return buffer
