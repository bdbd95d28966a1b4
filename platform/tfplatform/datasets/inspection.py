"""What a registration leaves out, found without reading the data (no TensorFlow here).

Parquet: schema, row counts and the label's range come from each shard's footer (pyarrow's
`read_metadata`); features and label default to the file's columns. CSV: the columns come from
the first shard's header line; counting rows would mean reading every shard, so CSV and TFRecord
registrations give their example counts (a wrong count only shortens or lengthens an epoch).
"""

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfplatform.core.errors import InvalidInput
from training import errors as training_errors
from training.shard_schema import NUMERIC_DTYPES, ShardedSource

# The first line of a CSV shard is read to find its columns; a longer one is not a header.
CSV_HEADER_MAX_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class DatasetRequest:
    name: str
    format: str
    train: str
    validation: str
    label: str
    features: dict[str, Any] | None = None
    feature_order: list[str] | None = None
    label_spec: dict[str, Any] | None = None
    pack: bool = False
    num_classes: int | None = None
    train_examples: int | None = None
    validation_examples: int | None = None
    size_bytes: int | None = None
    csv_columns: list[str] | None = None
    csv_header: bool = True
    # Filled in by the service: each split's local shard files (empty for remote URIs).
    shards: dict[str, list[Path]] = field(default_factory=dict)


def source_build(*, request: DatasetRequest) -> ShardedSource:
    found: dict[str, Any] = {}
    if request.format == "parquet" and all(request.shards.values()):
        found = _parquet_found(request=request)
    elif request.format == "csv" and request.shards.get("train"):
        found = _csv_found(request=request)
    local = {path for files in request.shards.values() for path in files}
    data = {
        "name": request.name, "format": request.format, "train": request.train,
        "validation": request.validation, "label": request.label, "pack": request.pack,
        "csv_header": request.csv_header,
        "features": _given(request.features, found.get("features"), "features"),
        "label_spec": _given(request.label_spec, found.get("label_spec"), "label_spec"),
        "train_examples": _count(request.train_examples, found.get("train_examples"),
                                 "train_examples"),
        "validation_examples": _count(request.validation_examples,
                                      found.get("validation_examples"), "validation_examples"),
        "num_classes": (request.num_classes if request.num_classes is not None
                        else found.get("num_classes")),
        "size_bytes": (sum(path.stat().st_size for path in local) if local
                       else request.size_bytes or 0),
        "csv_columns": request.csv_columns or found.get("csv_columns", []),
    }
    data["feature_order"] = request.feature_order or list(data["features"])
    try:
        return ShardedSource.from_dict(data)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error)) from error


def _given(value: Any, found: Any, name: str) -> Any:
    if value is not None:
        return value
    if found is None:
        raise InvalidInput(f"give {name}: it cannot be read from this dataset's files.",
                           field=name)
    return found


def _count(value: int | None, found: int | None, name: str) -> int:
    if value is not None and found is not None and value != found:
        raise InvalidInput(f"{name} is {value}, but the files' metadata say {found}.", field=name)
    return _given(value, found, name)


def _parquet_found(*, request: DatasetRequest) -> dict[str, Any]:
    import pyarrow.parquet as pq

    schema = None
    counts = {}
    label_max: int | None = None
    for split, files in request.shards.items():
        counts[split] = 0
        for path in files:
            try:
                meta = pq.read_metadata(path)
            except Exception as error:
                raise InvalidInput(f"{path.name} is not a Parquet file: {error}",
                                   field=split) from error
            columns = [(f.name, f.type) for f in meta.schema.to_arrow_schema()]
            if schema is not None and columns != schema:
                raise InvalidInput(f"{path.name}: its columns differ from the other shards'.",
                                   field=split)
            schema = columns
            counts[split] += meta.num_rows
            if split == "train":
                label_max = _label_max(meta=meta, label=request.label, known=label_max)
    types = dict(schema or [])
    if request.label not in types:
        raise InvalidInput(f"the Parquet files have no column {request.label!r}; they have "
                           f"{', '.join(types)}.", field="label")
    given = request.features or {}
    for name in given:
        if name not in types:
            raise InvalidInput(f"the Parquet files have no column {name!r}.", field="features")
    specs = {name: _arrow_spec(kind, given.get(name)) for name, kind in types.items()
             if name != request.label and (not given or name in given)}
    label_spec = _arrow_spec(types[request.label], request.label_spec)
    integer = label_spec["dtype"] in NUMERIC_DTYPES and "int" in label_spec["dtype"]
    return {
        "features": specs, "label_spec": label_spec, "train_examples": counts["train"],
        "validation_examples": counts["validation"],
        "num_classes": (label_max + 1 if integer and not label_spec["shape"]
                        and label_max is not None else None),
    }


def _label_max(*, meta: Any, label: str, known: int | None) -> int | None:
    """The label's largest value from the row groups' statistics: no data read."""
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            if column.path_in_schema != label:
                continue
            stats = column.statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.max, int):
                return known
            known = stats.max if known is None else max(known, stats.max)
    return known


def _arrow_spec(kind: Any, given: dict[str, Any] | None) -> dict[str, Any]:
    """A column's {"dtype", "shape"}: given ones are checked against the file's type."""
    import pyarrow as pa

    sizes = []
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
            pa.types.is_fixed_size_list(kind):
        sizes.append(kind.list_size if pa.types.is_fixed_size_list(kind) else None)
        kind = kind.value_type
    if pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        dtype = str(kind.to_pandas_dtype().__name__) if not pa.types.is_boolean(kind) else "bool"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        dtype = "string"
    else:
        raise InvalidInput(f"Parquet type {kind} is not supported.", field="features")
    if given is None:
        if any(size is None for size in sizes):
            raise InvalidInput("a list column's length is not in the Parquet schema: give "
                               "features (or label_spec) with its shape, e.g. [64].",
                               field="features")
        return {"dtype": dtype, "shape": [size for size in sizes if size is not None]}
    if not isinstance(given, dict) or (given.get("dtype") == "string") != (dtype == "string"):
        raise InvalidInput(f"a {dtype} column cannot be read as {given!r}.", field="features")
    if bool(sizes) != bool(given.get("shape")):
        raise InvalidInput(f"{given!r}: the column is {'a list' if sizes else 'a scalar'}; its "
                           f"shape must be {'a list of sizes' if sizes else '[]'}.",
                           field="features")
    return given


def _csv_found(*, request: DatasetRequest) -> dict[str, Any]:
    first = request.shards["train"][0]
    columns = request.csv_columns
    if columns is None:
        if not request.csv_header:
            raise InvalidInput("give csv_columns: the shards have no header line.",
                               field="csv_columns")
        with first.open("rb") as handle:
            line = handle.read(CSV_HEADER_MAX_BYTES).split(b"\n", 1)[0]
        columns = next(csv.reader(io.StringIO(line.decode("utf-8", errors="replace"))), [])
        columns = [c.strip() for c in columns]
    label_dtype = "int64" if request.num_classes is not None else "float32"
    return {
        "csv_columns": columns,
        "features": {c: {"dtype": "float32", "shape": []} for c in columns if c != request.label},
        "label_spec": {"dtype": label_dtype, "shape": []},
    }
