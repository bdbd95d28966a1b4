"""Only the ops inference graphs are made of pass: SavedModels that read or write files, run
a hidden graph, or point the saver at another checkpoint are found before serving; ordinary
models (TF1 graphs from TF Serving's tests, TF2 Keras exports) pass."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from serving.allowed_ops import ALLOWED_OPS
from serving.graph_check import (
    ASSET_OUTSIDE,
    EXIT_FINDINGS,
    HANDLE_CONSTANT,
    HIDDEN_GRAPH,
    UnsafeGraph,
    saved_model_check,
)
from tests.crafted_models import (
    checkpoint_prefix_replace,
    csv_read_model,
    dataset_from_graph_model,
    examples_layers_model,
    file_table_model,
    graph_constant_model,
    saved_model_save,
)
from tests.serving.conftest import HALF_PLUS_TWO, copy_tree

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


def _refused_ops(path: Path) -> set[str]:
    with pytest.raises(UnsafeGraph) as unsafe:
        saved_model_check(path=path)
    return {finding.op for finding in unsafe.value.findings}


@pytest.mark.parametrize("path", ["/etc/passwd", "/proc/self/environ"])
def test_a_dataset_reading_a_file_is_refused_by_name(path: str, tmp_path: Path) -> None:
    saved = saved_model_save(csv_read_model(path), tmp_path / "1")
    assert "CSVDatasetV2" in _refused_ops(saved)
    with pytest.raises(UnsafeGraph, match=r"uses .*CSVDatasetV2.*, which are not allowed"):
        saved_model_check(path=saved)


def test_a_graph_hidden_in_a_string_constant_is_refused(tmp_path: Path) -> None:
    runs_it = _refused_ops(saved_model_save(dataset_from_graph_model(), tmp_path / "run"))
    assert {"DatasetFromGraph", HIDDEN_GRAPH} <= runs_it
    # Carried for an op an operator might allow one day: refused even with every op allowed.
    carried = saved_model_save(graph_constant_model(), tmp_path / "carry")
    assert _refused_ops(carried) == {HIDDEN_GRAPH}
    with pytest.raises(UnsafeGraph):
        saved_model_check(path=carried, allowed=frozenset({"StringLength"}))


@pytest.mark.parametrize("op", ["RestoreV2", "SaveV2"])
def test_the_saver_on_a_foreign_checkpoint_is_refused(op: str, testdata: Path,
                                                      tmp_path: Path) -> None:
    tf2 = saved_model_save(_plain_keras(), tmp_path / "tf2")
    tf1 = copy_tree(testdata / HALF_PLUS_TWO / "00000123", tmp_path / "tf1")
    for path in (tf2, tf1):
        saved_model_check(path=path)  # the saver on its own filename passes
        checkpoint_prefix_replace(path, op=op, prefix="/models/other/1/variables/variables")
        assert _refused_ops(path) == {op}


def test_an_asset_pointing_outside_the_model_is_refused_even_with_its_op_allowed(
    tmp_path: Path,
) -> None:
    """The loader feeds an asset's tensor with assets/<filename>; a vocabulary table's file op,
    which an operator may allow, would read what that name reaches."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_save(file_table_model(), tmp_path / "1")
    allowed = frozenset({"InitializeTableFromTextFileV2"})
    saved_model_check(path=path, allowed=allowed)  # its own copy of the file, in assets/
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((path / "saved_model.pb").read_bytes())
    [asset] = saved_model.meta_graphs[0].asset_file_def
    asset.filename = "../../../../../../etc/passwd"
    (path / "saved_model.pb").write_bytes(saved_model.SerializeToString())
    with pytest.raises(UnsafeGraph) as unsafe:
        saved_model_check(path=path, allowed=allowed)
    assert {f.op for f in unsafe.value.findings} == {ASSET_OUTSIDE}


def _adapted() -> object:
    """Keras keeps an adapted layer's adapt_step (an IteratorGetNext) in the library."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    normalization = keras.layers.Normalization()
    normalization.adapt(np.arange(12, dtype=np.float32).reshape(4, 3))
    inputs = keras.Input(shape=(3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(normalization(inputs)))

    class Served(tf.Module):
        def __init__(self) -> None:
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": self.model(x)}

    return Served()


def _iterates() -> object:
    import tensorflow as tf

    class Iterates(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"first": next(iter(tf.data.Dataset.range(3))), "x": x}

    return Iterates()


def test_an_iterator_passes_only_where_nothing_the_server_runs_reaches_it(
    tmp_path: Path,
) -> None:
    saved_model_check(path=saved_model_save(_adapted(), tmp_path / "adapted"))
    assert {"IteratorGetNext", "RangeDataset"} <= _refused_ops(
        saved_model_save(_iterates(), tmp_path / "iterates"))


def test_a_constant_resource_handle_is_refused(tmp_path: Path) -> None:
    """It could name any resource of the session (a table, an iterator) by its name."""
    from tensorflow.core.framework import node_def_pb2, types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_save(_plain_keras(), tmp_path / "1")
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((path / "saved_model.pb").read_bytes())
    forged = node_def_pb2.NodeDef(name="forged", op="Const")
    forged.attr["dtype"].type = types_pb2.DT_RESOURCE
    forged.attr["value"].tensor.dtype = types_pb2.DT_RESOURCE
    forged.attr["value"].tensor.resource_handle_val.add(container="localhost", name="table")
    saved_model.meta_graphs[0].graph_def.node.append(forged)
    (path / "saved_model.pb").write_bytes(saved_model.SerializeToString())
    assert _refused_ops(path) == {HANDLE_CONSTANT}


def _prints(stream: object) -> object:
    import tensorflow as tf

    class Printer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            tf.print(x, output_stream=stream)
            return {"y": x}

    return Printer()


def test_tf_print_passes_to_the_log_and_is_refused_to_a_file(tmp_path: Path) -> None:
    saved_model_check(path=saved_model_save(_prints(sys.stderr), tmp_path / "log"))
    to_file = saved_model_save(_prints(f"file://{tmp_path}/planted"), tmp_path / "file")
    assert _refused_ops(to_file) == {"PrintV2 to a file"}


def test_a_call_of_anything_but_a_library_function_is_refused(tmp_path: Path) -> None:
    """A call names a function; a name that is no function of the library but a registered op
    would run that op."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_save(_plain_keras(), tmp_path / "1")
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((path / "saved_model.pb").read_bytes())
    [call] = [node for node in saved_model.meta_graphs[0].graph_def.node
              if node.op == "StatefulPartitionedCall" and "serve" in node.attr["f"].func.name]
    call.attr["f"].func.name = "ReadFile"
    (path / "saved_model.pb").write_bytes(saved_model.SerializeToString())
    assert any("ReadFile" in op for op in _refused_ops(path))


def test_the_allow_list_holds_no_io_and_only_real_ops() -> None:
    import tensorflow  # noqa: F401 - registers the ops
    from tensorflow.python.framework import op_def_registry

    assert not [op for op in ALLOWED_OPS if op_def_registry.get(op) is None]
    for word in ("Dataset", "Iterator", "File", "Reader", "Summary", "Debug", "PyFunc",
                 "Remote", "Graph", "Save", "Restore", "Checkpoint"):
        assert not [op for op in ALLOWED_OPS if word in op and not op.startswith("Sharded")], word


def test_ordinary_models_pass(testdata: Path, tmp_path: Path) -> None:
    # TF2: the saver lives in functions of the library.
    saved_model_check(path=saved_model_save(_plain_keras(), tmp_path / "1"))
    saved_model_check(path=saved_model_save(examples_layers_model(), tmp_path / "2"))
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
