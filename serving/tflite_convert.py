"""Converts a SavedModel to TF Lite in a confined process of its own:
    python -m serving.tflite_convert <saved_model_dir> <output.tflite>

The SavedModel is hostile input (the converter loads it, restoring its variables), so before
TensorFlow touches it this process confines itself as the model server does (confine.py): it
reads the SavedModel and the Python runtime, writes only the output's directory, and binds and
connects nowhere. Exit 0 with the file written, 2 with the converter's error on stderr.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

TFLITE_FILE = "model.tflite"  # where TF Serving looks for it in a version directory
EXIT_FAILED = 2
SECONDS = 600  # what a caller should allow: conversion of a large model takes minutes


def tflite_convert(*, saved_model: Path, output: Path) -> None:
    """In this process, unconfined: the converter's work alone."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    model = converter.convert()
    staging = output.with_name(f".{output.name}.tmp")
    staging.write_bytes(model)
    staging.replace(output)


def _confined_convert(*, saved_model: Path, output: Path, scratch: str) -> int:
    from confinement import confined_fork
    from serving.confine import server_confine

    # The converter works in temporary files: a scratch directory is the one it may use.
    os.environ["TMPDIR"] = scratch
    # Keras and matplotlib, loaded along with the converter, write their config and caches.
    for variable in ("KERAS_HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME"):
        os.environ[variable] = scratch
    tempfile.tempdir = scratch
    confined_fork()  # Landlock binds only the calling thread: confine the only one
    server_confine(read=(str(saved_model),), ports=(), write=(str(output.parent), scratch))
    try:
        tflite_convert(saved_model=saved_model, output=output)
    except Exception as exc:  # the converter's many error types all mean "cannot convert"
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m serving.tflite_convert <saved_model_dir> <output.tflite>",
              file=sys.stderr)
        return EXIT_FAILED
    saved_model, output = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    scratch = tempfile.mkdtemp(prefix="tflite-convert-")
    # A confined process cannot remove its scratch directory from /tmp: the conversion runs in
    # a child (forked before TensorFlow loads), and this unconfined parent cleans up after it.
    child = os.fork()
    if child == 0:
        code = EXIT_FAILED
        try:
            code = _confined_convert(saved_model=saved_model, output=output, scratch=scratch)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(child, 0)
    shutil.rmtree(scratch, ignore_errors=True)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
