"""`python -m serving`: the embedded model server, started with tensorflow_model_server's flags."""

import os

from serving.environment import KERAS_ALIASES_OFF

# Before TensorFlow loads, however the server was started (environment.py says why).
for name, value in KERAS_ALIASES_OFF.items():
    os.environ.setdefault(name, value)

from serving.flags import run  # noqa: E402 - after the environment above

if __name__ == "__main__":
    raise SystemExit(run())
