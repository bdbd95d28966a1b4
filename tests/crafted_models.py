"""SavedModels made to attack the model server, shared by the serving and platform tests."""

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
