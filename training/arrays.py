"""Datasets as in-memory numpy arrays, exactly as stored (no scaling: that lives in the model).

NumPy/scikit-learn only, no TensorFlow: the web process uses these loaders to validate uploads, and
`datasets.py` turns the arrays into tf.data pipelines inside the trial.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.errors import InvalidInput

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch"
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class ArrayData:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int | None  # None: the labels are targets of another task (regression...)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.x_train.shape[1:])

    @property
    def feature_sample(self) -> np.ndarray:
        return self.x_train

    def y_spec_integer(self) -> bool:
        return bool(np.issubdtype(self.y_train.dtype, np.integer))

    def y_dtype_name(self) -> str:
        return str(self.y_train.dtype)

    def summary(self) -> dict[str, object]:
        return {
            "name": self.name,
            "train_examples": len(self.x_train),
            "test_examples": len(self.x_test),
            "input_shape": list(self.input_shape),
            "input_dtype": str(self.x_train.dtype),
            "num_classes": self.num_classes,
        }


# scikit-learn ships the digits as one gzipped CSV, 64 pixels then the label per row.
DIGITS_FILE = ("datasets", "data", "digits.csv.gz")


def digits_table() -> np.ndarray:
    """The digits as scikit-learn ships them, read from its package folder: importing
    scikit-learn costs a trial most of a CPU-second at every start, reading the file 0.03 s.
    Where a release keeps the file elsewhere, its own `load_digits`."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, *DIGITS_FILE)
        if path.is_file():
            with gzip.open(path) as handle:
                return np.loadtxt(handle, delimiter=",")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.column_stack([bunch.data, bunch.target])


def digits_load() -> ArrayData:
    """scikit-learn's bundled 8x8 digits, flat 64 float features in 0..16, fixed 75/25 split."""
    table = digits_table()
    x = np.asarray(table[:, :-1], dtype=np.float32)
    y = np.asarray(table[:, -1], dtype=np.int64)
    # A fixed permutation (not sklearn's splitter) keeps the split identical across versions.
    order = np.random.default_rng(0).permutation(len(x))
    cut = int(len(x) * 0.75)
    train, test = order[:cut], order[cut:]
    return ArrayData("digits", x[train], y[train], x[test], y[test], num_classes=10)


def _cifar_batch_read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with path.open("rb") as handle:
        # The official CIFAR-10 "python version" is a pickle; it comes from the operator's
        # datasets directory, never from a user upload.
        batch = pickle.load(handle, encoding="bytes")  # noqa: S301
    try:
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (KeyError, TypeError) as exc:
        raise InvalidInput(f"{path} is not a CIFAR-10 batch (needs b'data' and b'labels')") from exc
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise InvalidInput(f"{path}: b'data' must be (N, 3072) uint8 with N labels")
    # Rows are 1024 red, 1024 green, 1024 blue values: to NHWC.
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def cifar10_check(*, datasets_dir: str) -> Path:
    """The CIFAR-10 folder, or a clear error naming where the files were expected."""
    root = Path(datasets_dir) / CIFAR_DIR
    expected = (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE)
    missing = [name for name in expected if not (root / name).is_file()]
    if missing:
        raise InvalidInput(
            f"CIFAR-10 not found: expected {root}/data_batch_1..5 and {root}/test_batch "
            f"(missing: {', '.join(missing)}); extract cifar-10-python.tar.gz into {datasets_dir}"
        )
    return root


def cifar10_load(*, datasets_dir: str) -> ArrayData:
    root = cifar10_check(datasets_dir=datasets_dir)
    parts = [_cifar_batch_read(root / name) for name in CIFAR_TRAIN_FILES]
    x_test, y_test = _cifar_batch_read(root / CIFAR_TEST_FILE)
    x_train = np.concatenate([p[0] for p in parts])
    y_train = np.concatenate([p[1] for p in parts])
    return ArrayData("cifar10", x_train, y_train, x_test, y_test, num_classes=10)


def synthetic_images_load(
    *, train_size: int = 2048, test_size: int = 256, seed: int = 0
) -> ArrayData:
    """CIFAR-shaped random uint8 images: measures throughput, the accuracy is meaningless."""
    rng = np.random.default_rng(seed)
    shape = (32, 32, 3)
    return ArrayData(
        "synthetic_images",
        rng.integers(0, 256, size=(train_size, *shape), dtype=np.uint8),
        rng.integers(0, 10, size=train_size, dtype=np.int64),
        rng.integers(0, 256, size=(test_size, *shape), dtype=np.uint8),
        rng.integers(0, 10, size=test_size, dtype=np.int64),
        num_classes=10,
    )


def _labels_check(*, y: np.ndarray, where: str) -> np.ndarray:
    """Class ids (1-D non-negative integers, as int64) or, for other tasks, numeric targets of
    any shape (as float32): which one decides whether the data has classes."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1 and _class_ids(y[:, 0]):
        y = y[:, 0]
    if y.ndim == 0 or not np.issubdtype(y.dtype, np.number) or np.issubdtype(
        y.dtype, np.complexfloating
    ):
        raise InvalidInput(
            f"{where} must be numeric: integer class ids, or targets of shape (N, ...)"
        )
    if _class_ids(y):
        return y.astype(np.int64)
    if not np.all(np.isfinite(y)):
        raise InvalidInput(f"{where} holds NaN or infinite values")
    return y.astype(np.float32)


def _class_ids(y: np.ndarray) -> bool:
    return bool(
        y.ndim == 1 and np.issubdtype(y.dtype, np.number) and len(y) > 0
        and np.all(np.isfinite(y)) and np.all(np.equal(np.mod(y, 1), 0)) and y.min() >= 0
    )


def arrays_check(
    *, name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
    y_test: np.ndarray,
) -> ArrayData:
    """Shapes, lengths and labels of user-supplied arrays (npz upload or build_dataset)."""
    x_train, x_test = np.asarray(x_train), np.asarray(x_test)
    y_train = _labels_check(y=y_train, where="y_train")
    y_test = _labels_check(y=y_test, where="y_test")
    for x_name, x, y_name, y in (("x_train", x_train, "y_train", y_train),
                                 ("x_test", x_test, "y_test", y_test)):
        if x.ndim < 2 or len(x) == 0:
            raise InvalidInput(f"{x_name} must be a non-empty array of shape (N, features...)")
        if len(x) != len(y):
            raise InvalidInput(f"{x_name} has {len(x)} rows but {y_name} has {len(y)} labels")
        if not np.issubdtype(x.dtype, np.number):
            raise InvalidInput(f"{x_name} must be numeric, got dtype {x.dtype}")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise InvalidInput(
            f"x_train rows {x_train.shape[1:]} differ from x_test rows {x_test.shape[1:]}"
        )
    if x_train.dtype == np.float64:  # TF trains in float32; halve the memory up front
        x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    if (y_train.dtype == np.int64) != (y_test.dtype == np.int64):
        raise InvalidInput("y_train and y_test must both be integer class ids, or both targets")
    if y_train.shape[1:] != y_test.shape[1:]:
        raise InvalidInput(
            f"y_train rows {y_train.shape[1:]} differ from y_test rows {y_test.shape[1:]}"
        )
    num_classes = (int(max(y_train.max(), y_test.max())) + 1 if y_train.dtype == np.int64
                   else None)
    return ArrayData(name, x_train, y_train, x_test, y_test, num_classes=num_classes)


# What an npz's arrays may hold once decompressed: a 10 MB upload of zeros can declare 10 GB.
NPZ_MAX_BYTES = 4 * 2**30


def npz_members_check(*, path: str, max_bytes: int) -> None:
    """Refuses an npz whose arrays would decompress past `max_bytes`, from its zip headers
    alone. Python's zipfile never inflates a member past its declared size (it fails the read
    instead), so the declared sizes bound what loading can allocate."""
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist()
                           if info.filename.removesuffix(".npy") in NPZ_KEYS)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidInput(f"{Path(path).name} is not a readable .npz archive: {exc}") from exc
    if declared > max_bytes:
        raise InvalidInput(
            f"{Path(path).name} would decompress to {declared / 2**30:.1f} GiB of arrays; "
            f"at most {max_bytes / 2**30:.1f} GiB is accepted"
        )


def npz_load(*, path: str) -> ArrayData:
    npz_members_check(path=path, max_bytes=NPZ_MAX_BYTES)
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} is not a readable .npz archive: {exc}") from exc
    with archive:
        missing = [key for key in NPZ_KEYS if key not in archive.files]
        if missing:
            raise InvalidInput(
                f"{Path(path).name} must contain arrays {', '.join(NPZ_KEYS)}; "
                f"missing {', '.join(missing)} (found {', '.join(archive.files) or 'nothing'})"
            )
        try:
            loaded = {key: archive[key] for key in NPZ_KEYS}
        # Object arrays would need pickle, which we refuse; a member whose data does not
        # match its declared size or CRC fails its read.
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise InvalidInput(f"{Path(path).name}: {exc}") from exc
    return arrays_check(name=Path(path).name, **loaded)


def csv_load(
    *, path: str, label_column: str, test_fraction: float = 0.2, seed: int = 0
) -> ArrayData:
    """Numeric feature columns plus one named label column; labels may be ints or class names."""
    if not label_column:
        raise InvalidInput("a CSV dataset needs the name of its label column")
    try:
        with Path(path).open(newline="") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path} is not a readable UTF-8 CSV file: {exc}") from exc
    if not rows:
        raise InvalidInput(f"{Path(path).name} is empty")
    header, body = [h.strip() for h in rows[0]], [r for r in rows[1:] if r]
    if label_column not in header:
        raise InvalidInput(
            f"label column {label_column!r} not in the CSV header ({', '.join(header)})"
        )
    if len(body) < 2:
        raise InvalidInput(f"{Path(path).name} needs at least 2 data rows, has {len(body)}")
    label_at = header.index(label_column)
    features, labels = [], []
    for line_no, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise InvalidInput(
                f"line {line_no} has {len(row)} fields, the header has {len(header)}"
            )
        try:
            features.append([float(v) for i, v in enumerate(row) if i != label_at])
        except ValueError as exc:
            raise InvalidInput(f"line {line_no}: feature values must be numbers ({exc})") from exc
        labels.append(row[label_at].strip())
    x = np.asarray(features, dtype=np.float32)
    try:
        y = _labels_check(y=np.asarray([float(v) for v in labels]), where=label_column)
    except ValueError:
        # Non-numeric labels are class names: index them in sorted order so ids are stable.
        ids = {name: i for i, name in enumerate(sorted(set(labels)))}
        y = np.asarray([ids[v] for v in labels], dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = min(max(1, round(len(x) * test_fraction)), len(x) - 1)
    test, train = order[:n_test], order[n_test:]
    num_classes = int(y.max()) + 1 if y.dtype == np.int64 else None
    return ArrayData(Path(path).name, x[train], y[train], x[test], y[test],
                     num_classes=num_classes)
