"""A registered sharded dataset as plain data: what it is, where its shards are, what they hold.

TensorFlow-free on purpose: the web process validates registrations with it, the trial reads the
shards with `shards.py`. A `ShardedSource` travels to the trial inside `TrialSpec.dataset_source`
as a dict (`to_dict`), and `from_dict` checks everything a hand-written dict could get wrong.

URIs: a local path (or `file://`), or `gs://`, `s3://`, `hdfs://`, read through TensorFlow's
filesystems in the trial. Each split is a folder (every shard in it, Hadoop's hidden files
`_SUCCESS`, `.part.crc` left out, as Spark writes them), a glob, or one file.
"""

from __future__ import annotations

import glob
import importlib.util
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training.errors import InvalidInput

FORMATS = ("tfrecord", "parquet", "csv")
SPLITS = ("train", "validation")
REMOTE_SCHEMES = ("gs", "s3", "hdfs")
# TensorFlow 2.x keeps gs:// in its core; s3:// and hdfs:// come with tensorflow-io's plugins.
PLUGIN_SCHEMES = ("s3", "hdfs")
NUMERIC_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                  "uint16", "uint32", "uint64", "bool")
DTYPES = (*NUMERIC_DTYPES, "string")
# tf.io.parse_example knows three kinds of feature; CSV cells are scalars of a few types.
FORMAT_DTYPES = {
    "tfrecord": ("float32", "int64", "string"),
    "csv": ("float32", "float64", "int32", "int64", "string"),
    "parquet": DTYPES,
}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]{0,199}$")
GLOB_CHARACTERS = "*?["
MAX_FEATURES = 10_000


@dataclass(frozen=True)
class ShardedSource:
    name: str
    format: str
    train: str
    validation: str
    features: dict[str, dict[str, Any]]
    label: str
    label_spec: dict[str, Any]
    train_examples: int
    validation_examples: int
    num_classes: int | None
    size_bytes: int
    # Concatenate every feature (numeric, cast to float32, flattened) into one vector, in
    # feature_order: what a model with one input (the zoo's mlp) takes.
    pack: bool = False
    # The features' order (for packing and for the dict): a dict's order does not survive
    # TrialSpec.to_json, which sorts keys. Empty: the order of `features`.
    feature_order: tuple[str, ...] = ()
    # CSV only: every column of a shard, in file order, and whether each shard starts with them.
    csv_columns: tuple[str, ...] = ()
    csv_header: bool = True

    def __post_init__(self) -> None:
        if not self.feature_order:
            object.__setattr__(self, "feature_order", tuple(self.features))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["feature_order"] = list(self.feature_order)
        data["csv_columns"] = list(self.csv_columns)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardedSource:
        if not isinstance(data, dict):
            raise InvalidInput("a sharded dataset must be described by an object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(f"unknown sharded dataset field(s): {', '.join(unknown)}")
        required = ("name", "format", "train", "validation", "features", "label", "label_spec",
                    "train_examples", "validation_examples", "size_bytes")
        missing = [key for key in required if key not in data]
        if missing:
            raise InvalidInput(f"sharded dataset is missing {', '.join(missing)}")
        try:
            source = cls(
                name=_text(data["name"], "name"),
                format=_text(data["format"], "format"),
                train=_text(data["train"], "train"),
                validation=_text(data["validation"], "validation"),
                features={_text(k, "feature name"): _spec(v, f"feature {k}")
                          for k, v in _mapping(data["features"], "features").items()},
                label=_text(data["label"], "label"),
                label_spec=_spec(data["label_spec"], "label_spec"),
                train_examples=_count(data["train_examples"], "train_examples"),
                validation_examples=_count(data["validation_examples"], "validation_examples"),
                num_classes=(None if data.get("num_classes") is None
                             else _count(data["num_classes"], "num_classes")),
                size_bytes=_count(data["size_bytes"], "size_bytes"),
                pack=_flag(data.get("pack", False), "pack"),
                feature_order=tuple(_text(n, "feature_order")
                                    for n in _sequence(data.get("feature_order", ()),
                                                       "feature_order")),
                csv_columns=tuple(_text(n, "csv_columns")
                                  for n in _sequence(data.get("csv_columns", ()), "csv_columns")),
                csv_header=_flag(data.get("csv_header", True), "csv_header"),
            )
        except (TypeError, ValueError) as error:
            if isinstance(error, InvalidInput):
                raise
            raise InvalidInput(f"sharded dataset: {error}") from error
        source_check(source=source)
        return source

    @property
    def input_shape(self) -> list[int] | None:
        """One example's input shape when x is one tensor (packed or a single feature)."""
        if self.pack:
            return [sum(_elements(self.features[n]["shape"]) for n in self.feature_order)]
        if len(self.feature_order) == 1:
            return list(self.features[self.feature_order[0]]["shape"])
        return None

    def summary(self) -> dict[str, object]:
        """What `catalog.dataset_validate` reports for arrays, for a sharded dataset."""
        single = self.features[self.feature_order[0]]["dtype"] if len(self.features) == 1 else ""
        return {
            "name": self.name, "format": self.format,
            "train_examples": self.train_examples, "test_examples": self.validation_examples,
            "input_shape": self.input_shape,
            "input_dtype": "float32" if self.pack else single,
            "num_classes": self.num_classes,
        }


def _elements(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidInput(f"sharded dataset {what} must be a non-empty string")
    return value


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"sharded dataset {what} must be a whole number, 0 or more")
    return value


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"sharded dataset {what} must be true or false")
    return value


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"sharded dataset {what} must be an object")
    return value


def _sequence(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise InvalidInput(f"sharded dataset {what} must be a list")
    return list(value)


def _spec(value: Any, what: str) -> dict[str, Any]:
    """{"dtype": ..., "shape": [...]}, the shape fixed (no -1 or None: batches are stacked)."""
    spec = _mapping(value, what)
    if set(spec) - {"dtype", "shape"}:
        raise InvalidInput(f"{what} takes only dtype and shape")
    dtype = spec.get("dtype")
    if dtype not in DTYPES:
        raise InvalidInput(f"{what}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    shape = spec.get("shape", [])
    if not isinstance(shape, list | tuple) or len(shape) > 8 or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
    ):
        raise InvalidInput(f"{what}: shape must be a list of positive sizes, e.g. [] or [64]")
    return {"dtype": dtype, "shape": list(shape)}


def source_check(*, source: ShardedSource) -> None:
    """What makes a source readable at all, whatever the URIs hold."""
    if not NAME.match(source.name):
        raise InvalidInput(f"dataset name {source.name!r}: letters, digits, _ . - / only")
    if source.format not in FORMATS:
        raise InvalidInput(f"dataset format must be one of {', '.join(FORMATS)}, "
                           f"got {source.format!r}")
    for split in SPLITS:
        uri_check(uri=getattr(source, split))
    if not source.features:
        raise InvalidInput("a dataset needs at least one feature besides its label")
    if len(source.features) > MAX_FEATURES:
        raise InvalidInput(f"a dataset may have at most {MAX_FEATURES} features")
    if source.label in source.features:
        raise InvalidInput(f"the label {source.label!r} must not also be a feature")
    if sorted(source.feature_order) != sorted(source.features):
        raise InvalidInput("feature_order must name every feature once")
    allowed = FORMAT_DTYPES[source.format]
    for name, spec in (*source.features.items(), (source.label, source.label_spec)):
        if spec["dtype"] not in allowed:
            raise InvalidInput(f"{source.format} column {name!r}: dtype {spec['dtype']} cannot "
                               f"be read from {source.format}; use one of {', '.join(allowed)}")
        if source.format == "csv" and spec["shape"]:
            raise InvalidInput(f"CSV column {name!r} holds one value: its shape must be []")
    if source.pack and any(s["dtype"] == "string" for s in source.features.values()):
        raise InvalidInput("pack concatenates numbers: a string feature cannot be packed")
    scalar_number = source.label_spec["dtype"] != "string" and not source.label_spec["shape"]
    if source.num_classes is not None and not scalar_number:
        raise InvalidInput("num_classes needs a scalar numeric label")
    if source.num_classes is not None and source.num_classes < 2:
        raise InvalidInput("num_classes must be at least 2 (leave it out for regression)")
    if source.format == "csv":
        if not source.csv_columns:
            raise InvalidInput("a CSV dataset needs csv_columns: every column, in file order")
        if len(set(source.csv_columns)) != len(source.csv_columns):
            raise InvalidInput("csv_columns must not repeat a name")
        absent = [n for n in (*source.features, source.label) if n not in source.csv_columns]
        if absent:
            raise InvalidInput(f"CSV columns {', '.join(absent)} are not among csv_columns")


def uri_scheme(uri: str) -> str:
    """'' for a local path (or file://), else the scheme: gs, s3, hdfs."""
    if uri.startswith("file://"):
        return ""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", uri)
    return match.group(1).lower() if match else ""


def uri_local_path(uri: str) -> str:
    return uri.removeprefix("file://")


def uri_check(*, uri: str) -> None:
    scheme = uri_scheme(uri)
    if scheme and scheme not in REMOTE_SCHEMES:
        raise InvalidInput(f"{uri}: unknown storage scheme {scheme}://; use a local path, "
                           f"{', '.join(s + '://' for s in REMOTE_SCHEMES)}")
    if not scheme and not uri_local_path(uri).startswith("/"):
        raise InvalidInput(f"{uri}: a local dataset path must be absolute")
    if ".." in Path(uri_local_path(uri)).parts:
        raise InvalidInput(f"{uri}: '..' is not allowed in a dataset path")


def scheme_plugins_check(*, uri: str) -> None:
    """Without importing TensorFlow: the node can read this scheme, or a plain reason why not."""
    scheme = uri_scheme(uri)
    if scheme in PLUGIN_SCHEMES and importlib.util.find_spec("tensorflow_io") is None:
        raise InvalidInput(plugins_missing_message(scheme=scheme))


def plugins_missing_message(*, scheme: str) -> str:
    return (f"{scheme}:// needs the tensorflow-io filesystem plugins (pip install "
            "tensorflow-io), which are not installed on this node; use a local or shared "
            "folder, or gs://")


def uri_base(uri: str) -> str:
    """The folder a split lives in: the URI itself, a glob's fixed leading folders, or a file's
    folder. For a local URI this is what a trial's sandbox must show it (read-only)."""
    path = uri_local_path(uri)
    if not any(c in path for c in GLOB_CHARACTERS):
        return path
    fixed = []
    for part in path.split("/"):
        if any(c in part for c in GLOB_CHARACTERS):
            break
        fixed.append(part)
    return "/".join(fixed) or "/"


def shard_visible(name: str) -> bool:
    """Hadoop's convention, which Spark follows: `_SUCCESS`, `_metadata`, `.crc` are not data."""
    return not name.startswith(("_", ".")) and not name.endswith(".crc")


def local_shards(*, uri: str) -> list[str]:
    """The shard files of a local split, sorted: the same listing `shards.py` makes with gfile."""
    path = uri_local_path(uri)
    if any(c in path for c in GLOB_CHARACTERS):
        found = glob.glob(path)
    elif Path(path).is_dir():
        found = [str(p) for p in Path(path).iterdir() if shard_visible(p.name)]
    else:
        found = [path] if Path(path).exists() else []
    return sorted(f for f in found if Path(f).is_file())


def local_roots(*, source: ShardedSource) -> tuple[str, ...]:
    """The local folders (or files) a trial reading this source must be able to read."""
    return tuple(dict.fromkeys(
        uri_base(getattr(source, split)) for split in SPLITS
        if not uri_scheme(getattr(source, split))
    ))


def source_from_spec(data: dict[str, Any]) -> ShardedSource | None:
    return ShardedSource.from_dict(data) if data else None

