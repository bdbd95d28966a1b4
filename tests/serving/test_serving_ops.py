"""A model server of another release than the exporting TensorFlow (compose's TF Serving
image): every op a SavedModel uses must be one that release has, or it is refused before it is
published, rather than failing to load there."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from serving.allowed_ops import ALLOWED_OPS, CHECKPOINT_OPS, UNREACHABLE_ONLY
from serving.graph_check import EXIT_UNSERVABLE
from serving.serving_ops import serving_ops, serving_versions, wheel_ops
from tests.crafted_models import newer_op_model, saved_model_save

ROOT = Path(__file__).resolve().parents[2]


def test_every_op_the_allow_list_passes_is_one_tf_serving_2_20_has() -> None:
    ops = serving_ops(version="2.20.0")
    assert ops >= ALLOWED_OPS | CHECKPOINT_OPS | UNREACHABLE_ONLY
    assert "DecodeJxl" not in ops  # TensorFlow 2.21's
    assert "2.20" in serving_versions()


def test_a_release_without_a_kept_op_list_is_said_so() -> None:
    with pytest.raises(ValueError, match=r"No op list is kept for TensorFlow Serving 1\.15\.0"):
        serving_ops(version="1.15.0")
    with pytest.raises(ValueError, match="not a TensorFlow Serving version"):
        serving_ops(version="latest")


def test_the_op_list_is_read_from_a_wheel_s_generated_wrappers(tmp_path: Path) -> None:
    wheel = tmp_path / "tensorflow-9.9.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tensorflow/python/ops/gen_math_ops.py",
                         '_, _, _op, _outputs = _op_def_library._apply_op_helper(\n'
                         '        "AddV2", x=x, y=y)\n'
                         '_op_def_library._apply_op_helper("MatMul", a=a, b=b)\n')
        archive.writestr("tensorflow/python/ops/math_ops.py",
                         '_op_def_library._apply_op_helper("NotGenerated")\n')
    assert wheel_ops(wheel=wheel) == ["AddV2", "MatMul"]


@pytest.mark.slow
def test_a_model_using_an_op_the_serving_release_lacks_is_found(tmp_path: Path) -> None:
    path = tmp_path / "decoder"
    saved_model_save(newer_op_model(), path)

    def check(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "serving.graph_check", str(path),
                               "--allow=DecodeJxl", *options], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False)

    older = check("--serving-version=2.20.0")
    assert older.returncode == EXIT_UNSERVABLE, older.stderr[-2000:]
    assert json.loads(older.stdout) == {"unserved": ["DecodeJxl"], "serving_version": "2.20.0"}
    assert check().returncode == 0  # the embedded server runs the exporting TensorFlow
