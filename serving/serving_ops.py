"""The op types each TensorFlow Serving release can run, for a model server of a version other
than the exporting TensorFlow (compose's `tensorflow/serving` image): a SavedModel using an op
that release lacks would load nowhere, so publish refuses it (graph_check.py, --serving-version).

    serving_ops(version="2.20.0")   # frozenset of op type names; ValueError if none is kept

TF Serving links TensorFlow's kernels of its own release, so its ops are that TensorFlow's:
each file in op_sets/ lists the ops TensorFlow's Python wrappers of that release define, read
from its wheel without installing it:

    python -m serving.serving_ops tensorflow_cpu-2.20.0-cp311-...whl > serving/op_sets/2.20.txt
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from functools import cache
from pathlib import Path

OP_SETS = Path(__file__).with_name("op_sets")
_OP_CALL = re.compile(r'_apply_op_helper\(\s*"([A-Za-z][A-Za-z0-9_]*)"')
_GEN_MODULE = re.compile(r"/gen_[a-z0-9_]+\.py$")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")


def _release(version: str) -> str:
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(f"{version!r} is not a TensorFlow Serving version (such as 2.20.0)")
    return f"{match[1]}.{match[2]}"


def serving_versions() -> list[str]:
    return sorted(path.stem for path in OP_SETS.glob("*.txt"))


@cache
def serving_ops(*, version: str) -> frozenset[str]:
    path = OP_SETS / f"{_release(version)}.txt"
    if not path.is_file():
        raise ValueError(f"No op list is kept for TensorFlow Serving {version} (kept: "
                         f"{', '.join(serving_versions())}; serving/serving_ops.py makes one)")
    lines = (line.strip() for line in path.read_text().splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


def wheel_ops(*, wheel: Path) -> list[str]:
    ops: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if _GEN_MODULE.search(name):
                ops.update(_OP_CALL.findall(archive.read(name).decode()))
    return sorted(ops)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m serving.serving_ops",
        description="Print the op types of a TensorFlow wheel, for serving/op_sets/.")
    parser.add_argument("wheel", type=Path, help="tensorflow or tensorflow-cpu, any platform")
    args = parser.parse_args(argv)
    print(f"# The op types of {args.wheel.name} (python -m serving.serving_ops).")
    print("\n".join(wheel_ops(wheel=args.wheel)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
