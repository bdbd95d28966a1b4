"""TF Serving's REST paths (its http_rest_api_handler's patterns), shared by the server's REST API
and the fronts that route a user's call before it (front_rest.py); no TensorFlow here."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

PATH_PREFIX = re.compile(r"/v1/.*", re.IGNORECASE)
PREDICTION = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
MODEL_STATUS = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)


def path_decode(text: str) -> str:
    return unquote_to_bytes(text).decode("utf-8", "surrogateescape")
