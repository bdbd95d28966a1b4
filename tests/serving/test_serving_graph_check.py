"""SavedModels that read or write files, or would let a request drive the saver, are found
before serving; ordinary models (TF1 graphs from TF Serving's tests, TF2 Keras exports) pass."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from serving.graph_check import EXIT_FINDINGS, UnsafeGraph, saved_model_check
from tests.crafted_models import file_table_model, saved_model_save

ROOT = Path(__file__).resolve().parents[2]


def _reads_a_file() -> object:
    import tensorflow as tf

    class Thief(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def serve(self, name: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"content": tf.io.read_file(name)}

    return Thief()


def _writes_a_file() -> object:
    import tensorflow as tf

    class Vandal(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            tf.io.write_file("/tmp/planted", tf.strings.as_string(x[0]))
            return {"y": x * 2.0}

    return Vandal()


def _plain_keras() -> object:
    import tensorflow as tf
    import tf_keras as keras

    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])

    class Served(tf.Module):
        def __init__(self) -> None:
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": self.model(x)}

    return Served()


@pytest.mark.parametrize(("factory", "op"), [
    (_reads_a_file, "ReadFile"),
    (_writes_a_file, "WriteFile"),
    (file_table_model, "InitializeTableFromTextFileV2"),
])
def test_a_model_that_touches_files_is_refused(
    factory: Callable[[], object], op: str, tmp_path: Path
) -> None:
    path = saved_model_save(factory(), tmp_path / "1")
    with pytest.raises(UnsafeGraph) as unsafe:
        saved_model_check(path=path)
    assert op in {finding.op for finding in unsafe.value.findings}
    saved_model_check(path=path, allowed=frozenset({op}))  # what an operator may allow


def test_ordinary_models_pass(testdata: Path, tmp_path: Path) -> None:
    # TF2: the saver lives in functions of the library.
    saved_model_check(path=saved_model_save(_plain_keras(), tmp_path / "1"))
    for version in testdata.glob("*/*/saved_model.pb"):  # TF1 graphs, saver in the graph
        saved_model_check(path=version.parent)


def test_the_command_line_answers_in_json_and_exit_codes(tmp_path: Path) -> None:
    path = saved_model_save(_reads_a_file(), tmp_path / "1")
    found = subprocess.run([sys.executable, "-m", "serving.graph_check", str(path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert found.returncode == EXIT_FINDINGS, found.stderr[-2000:]
    assert "ReadFile" in {f["op"] for f in json.loads(found.stdout)["findings"]}
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "saved_model.pb").write_bytes(b"\xff" * 100)
    junk = subprocess.run([sys.executable, "-m", "serving.graph_check", str(tmp_path / "junk")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert junk.returncode == 2 and "error" in json.loads(junk.stdout)
