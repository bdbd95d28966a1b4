"""Reading a registered sharded dataset (shard_schema.ShardedSource) as a stream of examples.

    dataset = shards_dataset(source=source, split="train", num_input_pipelines=2,
                             input_pipeline_id=0, shuffle_seed=None)   # unbatched (x, y)

Sharding is by file: pipeline i of n reads files i, i+n, ... of the sorted listing, so n workers
read disjoint files and together every example once (tf.data's own auto-sharding is switched
off). Nothing is loaded whole: TFRecord and CSV are TensorFlow's streaming readers; Parquet is
read one record batch at a time with pyarrow (tensorflow-io's Parquet reader and filesystem
plugins do not load with TensorFlow 2.21: its last release, 0.37.1, misses symbols of 2.21).
Parquet goes through a Python generator, so a pipeline must be built in the process that runs
it: fine for distribute_datasets_from_function, not for a parameter-server coordinator shipping
the graph to workers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from training.errors import InvalidInput
from training.shard_schema import (
    GLOB_CHARACTERS,
    SPLITS,
    ShardedSource,
    plugins_missing_message,
    shard_visible,
    uri_local_path,
    uri_scheme,
)
from training.trial.tfenv import tf

AUTOTUNE = tf.data.AUTOTUNE
# Rows per Parquet record batch: memory held per open file is about this many examples.
PARQUET_BATCH_ROWS = 1024
# Serialized TFRecord examples parsed per call (parse_example on a batch is far cheaper), and at
# most about this many bytes of them: each of the interleaved files holds a batch raw and parsed.
TFRECORD_PARSE_BATCH = 256
TFRECORD_PARSE_BYTES = 4 * 2**20
# Files read at once when interleaving a shuffled split.
CYCLE_LENGTH = 4


def shards_dataset(*, source: ShardedSource, split: str, num_input_pipelines: int,
                   input_pipeline_id: int, shuffle_seed: int | None) -> Any:
    """UNBATCHED (x, y) examples of one split for one input pipeline (see the module's doc)."""
    if split not in SPLITS:
        raise InvalidInput(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if not 0 <= input_pipeline_id < num_input_pipelines:
        raise InvalidInput(f"input pipeline {input_pipeline_id} of {num_input_pipelines}?")
    uri = getattr(source, split)
    files = shard_files(uri=uri)
    if not files:
        raise InvalidInput(f"dataset {source.name}: no shard files at {uri} ({split} split)")
    if len(files) < num_input_pipelines:
        raise InvalidInput(
            f"dataset {source.name}: the {split} split has {len(files)} file(s) for "
            f"{num_input_pipelines} input pipelines; each pipeline reads whole files, so write "
            f"it as at least {num_input_pipelines} shards (e.g. Spark's repartition)"
        )
    mine = files[input_pipeline_id::num_input_pipelines]
    shuffle = shuffle_seed is not None or split == "train"
    names = tf.data.Dataset.from_tensor_slices(mine)
    if shuffle:
        names = names.shuffle(len(mine), seed=shuffle_seed, reshuffle_each_iteration=True)
    reader = _READERS[source.format]
    if shuffle:
        examples = names.interleave(
            lambda path: reader(source, path), cycle_length=min(len(mine), CYCLE_LENGTH),
            num_parallel_calls=AUTOTUNE, deterministic=shuffle_seed is not None,
        )
    else:  # file after file, in order: the same validation stream every time
        examples = names.flat_map(lambda path: reader(source, path))
    examples = examples.map(lambda columns: _example(source, columns),
                            num_parallel_calls=AUTOTUNE, deterministic=True)
    options = tf.data.Options()
    # Already sharded by file above; auto-sharding again would drop examples.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return examples.with_options(options)


def scheme_check(*, uri: str) -> None:
    """The URI's filesystem is registered with TensorFlow here, or a plain reason why not."""
    scheme = uri_scheme(uri)
    if not scheme or scheme in tf.io.gfile.get_registered_schemes():
        return
    # Absent or broken (0.37.1 does not load with TF 2.21): the check below says so.
    with contextlib.suppress(Exception):
        import tensorflow_io  # noqa: F401 - registers s3:// and hdfs:// where its plugins load
    if scheme not in tf.io.gfile.get_registered_schemes():
        raise InvalidInput(
            plugins_missing_message(scheme=scheme)
            + f" (TensorFlow {tf.__version__} here reads "
            + ", ".join(s + "://" for s in tf.io.gfile.get_registered_schemes() if s) + ")"
        )


def shard_files(*, uri: str) -> list[str]:
    """The split's shard files, sorted: a folder's visible files, a glob's matches, or the file."""
    scheme_check(uri=uri)
    try:
        if any(c in uri.split("://")[-1] for c in GLOB_CHARACTERS):
            found = tf.io.gfile.glob(uri)
        elif tf.io.gfile.isdir(uri):
            found = [_join(uri, name.rstrip("/")) for name in tf.io.gfile.listdir(uri)
                     if shard_visible(name)]
        else:
            found = [uri] if tf.io.gfile.exists(uri) else []
        return sorted(f for f in found if not tf.io.gfile.isdir(f))
    except tf.errors.OpError as error:
        raise InvalidInput(f"cannot list {uri}: {error.message}") from error


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"


def _columns(source: ShardedSource) -> dict[str, dict[str, Any]]:
    return {**{n: source.features[n] for n in source.feature_order},
            source.label: source.label_spec}


def _example(source: ShardedSource, columns: dict[str, Any]) -> tuple[Any, Any]:
    y = columns[source.label]
    if source.pack:
        return tf.concat([tf.reshape(tf.cast(columns[n], tf.float32), [-1])
                          for n in source.feature_order], axis=0), y
    if len(source.feature_order) == 1:
        return columns[source.feature_order[0]], y
    return {n: columns[n] for n in source.feature_order}, y


def _tfrecord(source: ShardedSource, path: Any) -> Any:
    spec = {name: tf.io.FixedLenFeature(column["shape"], tf.as_dtype(column["dtype"]))
            for name, column in _columns(source).items()}
    example_bytes = source.size_bytes // max(1, source.train_examples + source.validation_examples)
    batch = max(1, min(TFRECORD_PARSE_BATCH, TFRECORD_PARSE_BYTES // max(1, example_bytes)))
    records = tf.data.TFRecordDataset(path).batch(batch)
    return records.map(lambda batch: tf.io.parse_example(batch, spec)).unbatch()


def _csv(source: ShardedSource, path: Any) -> Any:
    wanted = _columns(source)
    indices = sorted(source.csv_columns.index(name) for name in wanted)
    names = [source.csv_columns[i] for i in indices]
    # A dtype as default makes every cell required: an empty one is an error, not a zero.
    defaults = [tf.as_dtype(wanted[name]["dtype"]) for name in names]
    rows = tf.data.experimental.CsvDataset(path, defaults, header=source.csv_header,
                                           select_cols=indices)
    return rows.map(lambda *cells: dict(zip(names, cells, strict=True)))


def _parquet(source: ShardedSource, path: Any) -> Any:
    columns = _columns(source)
    signature = {name: tf.TensorSpec([None, *column["shape"]], tf.as_dtype(column["dtype"]))
                 for name, column in columns.items()}
    batches = tf.data.Dataset.from_generator(
        lambda p: parquet_batches(path=p.decode(), columns=columns), args=(path,),
        output_signature=signature,
    )
    return batches.unbatch()


def parquet_batches(*, path: str, columns: dict[str, dict[str, Any]],
                    rows: int = PARQUET_BATCH_ROWS) -> Iterator[dict[str, np.ndarray]]:
    """One file's columns, `rows` at a time (pyarrow's iter_batches): never the whole file."""
    import pyarrow.parquet as pq

    local = not uri_scheme(path)
    handle = open(uri_local_path(path), "rb") if local else tf.io.gfile.GFile(path, "rb")  # noqa: SIM115
    with handle:
        reader = pq.ParquetFile(handle)
        absent = [name for name in columns if name not in reader.schema_arrow.names]
        if absent:
            raise InvalidInput(f"{path} has no column(s) {', '.join(absent)}")
        for batch in reader.iter_batches(batch_size=rows, columns=list(columns)):
            yield {name: arrow_to_numpy(batch.column(name), name=name, **columns[name])
                   for name in columns}


def arrow_to_numpy(array: Any, *, name: str, dtype: str, shape: list[int]) -> np.ndarray:
    """A record batch's column as (rows, *shape) of `dtype`; nested lists flattened and checked."""
    import pyarrow as pa

    if array.null_count:
        raise InvalidInput(f"column {name} has {array.null_count} empty value(s)")
    rows = len(array)
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or \
            pa.types.is_fixed_size_list(array.type):
        array = array.flatten()
    values = array.to_numpy(zero_copy_only=False)
    size = int(np.prod(shape)) if shape else 1
    if values.size != rows * size:
        raise InvalidInput(f"column {name}: {values.size} values for {rows} rows of shape "
                           f"{shape}; every row must hold {size}")
    if dtype == "string":
        return values.astype(object).reshape(rows, *shape)
    return values.astype(np.dtype(dtype), copy=False).reshape(rows, *shape)


_READERS = {"tfrecord": _tfrecord, "csv": _csv, "parquet": _parquet}
