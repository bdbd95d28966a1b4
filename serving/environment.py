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
# Every model process gets it. Without it, importing TensorFlow imports Keras 3 (and
# scikit-learn through it) to alias tf.losses, tf.optimizers and the like, which loading and
# running a SavedModel never uses: 1.6 of its 5.2 CPU-seconds to start.
KERAS_ALIASES_OFF = {"TF_USE_LEGACY_KERAS": "1"}


def model_process_env(*, extra: Mapping[str, str] | None = None,
                      source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (this process's environment), HOME, then `extra`."""
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items()
           if name in PASSED or name.startswith(PASSED_PREFIXES)}
    return {**env, "HOME": HOME, **KERAS_ALIASES_OFF, **(extra or {})}
