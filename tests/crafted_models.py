"""SavedModels made to attack the model server, and an ordinary Keras one to hold the graph check
against, shared by the serving and platform tests."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def file_table_model(path: str = "/etc/passwd") -> object:
    """A model whose init op (a lookup table's initializer) reads `path`, outside any version
    directory; `serve` answers each line's number, -1 for a line not in the file."""
    import tensorflow as tf

    class Init(tf.Module):
        def __init__(self) -> None:
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.TextFileInitializer(
                    path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                    tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
                default_value=-1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, words: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"ids": self.table.lookup(words)}

    return Init()


def file_read_model(path: str) -> object:
    """A model whose every prediction reads `path` (a ReadFile op on a constant: unlike a table's
    initializer, not copied into the SavedModel's assets when saved) and answers its text."""
    import tensorflow as tf

    class Reader(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"content": tf.fill(tf.shape(x), tf.io.read_file(path))}

    return Reader()


def examples_layers_model() -> object:
    """A tf-keras model with every layer that examples/ and training/trial/zoo.py use, served as the
    platform's export serves it (a tf.function signature over the model)."""
    import tensorflow as tf
    import tf_keras as keras

    layers = keras.layers
    inputs = keras.Input(shape=(8, 8), name="inputs")
    x = layers.Rescaling(1.0 / 16)(inputs)
    sequence = layers.GRU(4)(layers.Normalization(mean=0.0, variance=1.0)(x))
    x = layers.Reshape((8, 8, 1))(x)
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.Add()([x, layers.Conv2D(4, 1)(x)])
    pooled = layers.GlobalAveragePooling2D()(x)
    x = layers.Flatten()(layers.MaxPooling2D()(x))
    x = layers.Dropout(0.1)(layers.Dense(4, activation="relu")(x))
    x = layers.concatenate([x, pooled, sequence])
    model = keras.Model(inputs, layers.Dense(3, activation="softmax")(x))

    class Served(tf.Module):
        def __init__(self) -> None:
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            probabilities = self.model(x, training=False)
            return {"probabilities": probabilities,
                    "class_id": tf.argmax(probabilities, axis=-1)}

    return Served()


def saved_model_save(module: object, path: Path) -> Path:
    import tensorflow as tf

    tf.saved_model.save(module, str(path), signatures=module.serve)  # type: ignore[attr-defined]
    return path


def directory_zip(path: Path, *, name: str) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for file in sorted(path.rglob("*")):
            if file.is_file():
                archive.write(file, str(file.relative_to(path)))
    buffer.seek(0)
    buffer.name = name
    return buffer


def csv_read_model(path: str) -> object:
    """The issue's attack: a serving function that reads `path` with tf.data's CSV reader
    (CSVDatasetV2) and answers its lines."""
    import tensorflow as tf

    class CsvReader(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            lines = tf.data.experimental.CsvDataset(path, record_defaults=[""],
                                                    field_delim="\x07")
            return {"lines": tf.data.experimental.get_single_element(lines.batch(10_000))[0],
                    "x": x}

    return CsvReader()


def _dataset_graph() -> bytes:
    import tensorflow as tf

    return bytes(tf.data.Dataset.range(3)._as_serialized_graph().numpy())


def dataset_from_graph_model() -> object:
    """A serving function that runs a GraphDef it carries in a string constant."""
    import tensorflow as tf

    graph = _dataset_graph()

    class Hidden(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            handle = tf.raw_ops.DatasetFromGraph(graph_def=tf.constant(graph))
            return {"n": tf.raw_ops.DatasetCardinality(input_dataset=handle), "x": x}

    return Hidden()


def graph_constant_model() -> object:
    """A serving function that only carries a serialized GraphDef (for an op to run later)."""
    import tensorflow as tf

    graph = _dataset_graph()

    class Carrier(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"n": tf.strings.length(tf.constant(graph)), "x": x}

    return Carrier()


def checkpoint_prefix_replace(path: Path, *, op: str, prefix: str) -> Path:
    """Rewrites the saved model at `path` so that its saver's `op` (RestoreV2, SaveV2) reads or
    writes the checkpoint at the constant `prefix` instead of the saver's filename: what the
    server would run at load, in the saver's own nodes."""
    from tensorflow.core.framework import node_def_pb2, tensor_pb2, types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((path / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0].graph_def
    scopes = [graph.node, *(f.node_def for f in graph.library.function)]
    replaced = 0
    for nodes in scopes:
        for node in [n for n in nodes if n.op == op]:
            constant = node_def_pb2.NodeDef(name=f"{node.name}/foreign", op="Const")
            constant.attr["dtype"].type = types_pb2.DT_STRING
            constant.attr["value"].tensor.CopyFrom(tensor_pb2.TensorProto(
                dtype=types_pb2.DT_STRING, string_val=[prefix.encode()]))
            nodes.append(constant)
            in_function = nodes is not graph.node
            node.input[0] = f"{constant.name}:output:0" if in_function else constant.name
            replaced += 1
    assert replaced, f"no {op} in {path}"
    (path / "saved_model.pb").write_bytes(saved_model.SerializeToString())
    return path


def newer_op_model() -> object:
    """An image decoder of TensorFlow 2.21 (DecodeJxl, which 2.20 lacks): a model that TF
    Serving 2.20 could not load whatever the platform's own TensorFlow can."""
    import tensorflow as tf

    class Decoder(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def serve(self, image: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"pixels": tf.raw_ops.DecodeJxl(contents=image, channels=3)}

    return Decoder()
