"""The environment of the processes that load a SavedModel (the model server, the TF Lite
converter, the graph check): a SavedModel is a program, and whatever its process holds it can
read back (/proc/self/environ). They get what runs Python and TensorFlow, never the platform's
settings: no secret key, database or broker URL, admin password.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Names passed on as they are: the interpreter, locale, TensorFlow's logging and devices.
PASSED = frozenset({
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONUNBUFFERED",
    "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "TF_ENABLE_ONEDNN_OPTS",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
})
PASSED_PREFIXES = ("TF_CPP_",)
# No one's home: nothing of the platform user's (dot files, user site-packages) is read there.
HOME = "/nonexistent"


def model_process_env(*, extra: Mapping[str, str] | None = None,
                      source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (this process's environment), HOME, then `extra`."""
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items()
           if name in PASSED or name.startswith(PASSED_PREFIXES)}
    return {**env, "HOME": HOME, **(extra or {})}
