"""Sharded file datasets read as streams: TFRecord, Parquet and CSV shards, split by file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.data.shards import parquet_batches, shards_dataset
from training.errors import InvalidInput
from training.shard_schema import ShardedSource, local_roots
from training.trial.tfenv import tf

FILES = 3
ROWS = 10  # per file; example i of file f has a == 100 * f + i


def _source(*, format: str, folder: Path, **changes: Any) -> ShardedSource:
    data: dict[str, Any] = {
        "name": "tiny", "format": format, "train": str(folder), "validation": str(folder),
        "features": {"a": {"dtype": "float32", "shape": []},
                     "b": {"dtype": "float32", "shape": []}},
        "label": "label", "label_spec": {"dtype": "int64", "shape": []},
        "train_examples": FILES * ROWS, "validation_examples": FILES * ROWS,
        "num_classes": 3, "size_bytes": 1,
        "csv_columns": ["a", "label", "b"] if format == "csv" else [],
    }
    return ShardedSource.from_dict({**data, **changes})


def _rows(file: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = (100 * file + np.arange(ROWS)).astype(np.float32)
    return a, -a, np.arange(ROWS) % 3


def _write_parquet(folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    for file in range(FILES):
        a, b, label = _rows(file)
        pq.write_table(pa.table({"a": a, "b": b, "label": label}),
                       folder / f"part-{file:05d}.parquet")
    (folder / "_SUCCESS").touch()  # Spark's marker: not a shard
    return folder


def _write_tfrecord(folder: Path) -> Path:
    folder.mkdir()
    for file in range(FILES):
        with tf.io.TFRecordWriter(str(folder / f"part-{file:05d}")) as writer:
            for a, b, label in zip(*_rows(file), strict=True):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "a": tf.train.Feature(float_list=tf.train.FloatList(value=[a])),
                    "b": tf.train.Feature(float_list=tf.train.FloatList(value=[b])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }))
                writer.write(example.SerializeToString())
    return folder


def _write_csv(folder: Path) -> Path:
    folder.mkdir()
    for file in range(FILES):
        lines = ["a,label,b"] + [f"{a},{label},{b}" for a, b, label in zip(*_rows(file),
                                                                          strict=True)]
        (folder / f"part-{file:05d}.csv").write_text("\n".join(lines) + "\n")
    return folder


WRITERS = {"parquet": _write_parquet, "tfrecord": _write_tfrecord, "csv": _write_csv}


def _values(dataset: Any) -> list[float]:
    return [float(x["a"].numpy()) if isinstance(x, dict) else float(x.numpy()[0])
            for x, _ in dataset]


@pytest.mark.parametrize("format", ["parquet", "tfrecord", "csv"])
def test_two_pipelines_read_disjoint_files_and_together_every_example(
    format: str, tmp_path: Path
) -> None:
    source = _source(format=format, folder=WRITERS[format](tmp_path / format))
    seen = []
    for pipeline in range(2):
        dataset = shards_dataset(source=source, split="validation", num_input_pipelines=2,
                                 input_pipeline_id=pipeline, shuffle_seed=None)
        values = _values(dataset)
        seen.append({int(v) // 100 for v in values})
        assert len(values) == ROWS * len(seen[-1])
    assert seen == [{0, 2}, {1}]  # files 0, 2 and file 1: by file, sorted
    x, y = next(iter(shards_dataset(source=source, split="validation", num_input_pipelines=1,
                                    input_pipeline_id=0, shuffle_seed=None)))
    assert set(x) == {"a", "b"} and float(x["b"]) == -float(x["a"])  # two features: a dict
    assert y.dtype == tf.int64 and y.shape == ()


def test_packed_features_are_one_float_vector_and_a_single_feature_one_tensor(
    tmp_path: Path
) -> None:
    folder = _write_parquet(tmp_path / "p")
    packed = _source(format="parquet", folder=folder, pack=True, feature_order=["b", "a"])
    x, _ = next(iter(shards_dataset(source=packed, split="validation", num_input_pipelines=1,
                                    input_pipeline_id=0, shuffle_seed=None)))
    assert x.dtype == tf.float32 and x.numpy().tolist() == [-0.0, 0.0]
    assert packed.input_shape == [2]
    single = _source(format="parquet", folder=folder, features={"a": {"dtype": "float64",
                                                                      "shape": []}})
    x, _ = next(iter(shards_dataset(source=single, split="validation", num_input_pipelines=1,
                                    input_pipeline_id=0, shuffle_seed=None)))
    assert x.dtype == tf.float64 and x.shape == ()


def test_train_split_is_shuffled_by_file_and_a_seed_repeats_the_order(tmp_path: Path) -> None:
    source = _source(format="tfrecord", folder=_write_tfrecord(tmp_path / "t"))

    def order(seed: int | None) -> list[float]:
        return _values(shards_dataset(source=source, split="train", num_input_pipelines=1,
                                      input_pipeline_id=0, shuffle_seed=seed))

    assert sorted(order(None)) == sorted(_values(shards_dataset(
        source=source, split="validation", num_input_pipelines=1, input_pipeline_id=0,
        shuffle_seed=None)))
    assert order(7) == order(7)


def test_parquet_is_read_one_record_batch_at_a_time(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "big.parquet"
    rows = 5_000
    pq.write_table(pa.table({"v": pa.array([[float(i), 1.0] for i in range(rows)],
                                           type=pa.list_(pa.float32())),
                             "label": np.arange(rows)}), path, row_group_size=rows)
    batches = list(parquet_batches(path=str(path), rows=1024, columns={
        "v": {"dtype": "float32", "shape": [2]}, "label": {"dtype": "int64", "shape": []}}))
    assert [len(b["label"]) for b in batches] == [1024] * 4 + [rows - 4096]
    assert batches[1]["v"].shape == (1024, 2) and batches[1]["v"][0, 0] == 1024.0
    source = ShardedSource.from_dict({
        "name": "big", "format": "parquet", "train": str(path), "validation": str(path),
        "features": {"v": {"dtype": "float32", "shape": [2]}}, "label": "label",
        "label_spec": {"dtype": "int64", "shape": []}, "train_examples": rows,
        "validation_examples": rows, "num_classes": None, "size_bytes": 1})
    dataset = shards_dataset(source=source, split="validation", num_input_pipelines=1,
                             input_pipeline_id=0, shuffle_seed=None)
    assert sum(1 for _ in dataset) == rows


def test_fewer_files_than_pipelines_missing_files_and_bad_columns_are_refused(
    tmp_path: Path
) -> None:
    source = _source(format="parquet", folder=_write_parquet(tmp_path / "p"))
    with pytest.raises(InvalidInput, match="3 file\\(s\\) for 4 input pipelines"):
        shards_dataset(source=source, split="train", num_input_pipelines=4, input_pipeline_id=0,
                       shuffle_seed=None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInput, match="no shard files"):
        shards_dataset(source=_source(format="parquet", folder=empty), split="train",
                       num_input_pipelines=1, input_pipeline_id=0, shuffle_seed=None)
    wrong = _source(format="parquet", folder=tmp_path / "p",
                    features={"nope": {"dtype": "float32", "shape": []}})
    with pytest.raises(tf.errors.OpError, match="no column\\(s\\) nope"):
        list(shards_dataset(source=wrong, split="validation", num_input_pipelines=1,
                            input_pipeline_id=0, shuffle_seed=None))


@pytest.mark.parametrize(("change", "message"), [
    ({"format": "orc"}, "format must be one of"),
    ({"features": {"a": {"dtype": "complex64", "shape": []}}}, "dtype must be one of"),
    ({"features": {"a": {"dtype": "float32", "shape": [-1]}}}, "shape must be a list"),
    ({"features": {"a": {"dtype": "float64", "shape": []}}, "format": "tfrecord"},
     "cannot be read from tfrecord"),
    ({"label": "a"}, "must not also be a feature"),
    ({"train": "relative/path"}, "must be absolute"),
    ({"train": "ftp://host/x"}, "unknown storage scheme"),
    ({"train": "/data/../etc"}, "'..' is not allowed"),
    ({"num_classes": 1}, "at least 2"),
    ({"format": "csv", "csv_columns": []}, "needs csv_columns"),
    ({"surprise": 1}, "unknown sharded dataset field"),
])
def test_a_malformed_source_is_refused_with_the_reason(
    change: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match=message):
        _source(**{"format": "parquet", "folder": tmp_path, **change})


def test_a_source_survives_the_trial_spec_and_names_the_folders_a_sandbox_shows(
    tmp_path: Path
) -> None:
    import json

    source = _source(format="parquet", folder=tmp_path, pack=True, feature_order=["b", "a"],
                     validation=f"{tmp_path}/val/part-*.parquet")
    again = ShardedSource.from_dict(json.loads(json.dumps(source.to_dict(), sort_keys=True)))
    assert again == source and again.feature_order == ("b", "a")
    assert local_roots(source=again) == (str(tmp_path), f"{tmp_path}/val")


@pytest.mark.parametrize("scheme", ["s3", "hdfs"])
def test_a_scheme_without_its_filesystem_plugin_is_refused_plainly(
    scheme: str, tmp_path: Path
) -> None:
    if scheme in tf.io.gfile.get_registered_schemes():
        pytest.skip(f"{scheme}:// is registered on this node")
    source = _source(format="parquet", folder=tmp_path, train=f"{scheme}://bucket/train")
    with pytest.raises(InvalidInput, match=f"{scheme}:// needs the tensorflow-io filesystem "
                                           "plugins .* not installed on this node"):
        shards_dataset(source=source, split="train", num_input_pipelines=1,
                       input_pipeline_id=0, shuffle_seed=None)
