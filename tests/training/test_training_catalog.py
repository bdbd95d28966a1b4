"""Up-front validation (TF-free, what the web process calls) and the numpy dataset loaders."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from training import arrays, catalog
from training.errors import InvalidInput
from training.spec import Resources, TrialSpec


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {
        "trial_id": "t",
        "model": "mlp",
        "dataset": "digits",
        "work_dir": "/tmp/w",
    }
    return TrialSpec(**{**base, **fields})  # type: ignore[arg-type]


def test_digits_is_raw_pixels_with_a_fixed_split() -> None:
    first, second = arrays.digits_load(), arrays.digits_load()
    assert first.x_train.shape == (1347, 64) and first.x_test.shape == (450, 64)
    assert first.x_train.dtype == np.float32 and first.x_train.max() == 16.0
    assert first.num_classes == 10
    np.testing.assert_array_equal(first.y_test, second.y_test)


def test_cifar10_reads_the_official_pickle_layout(
    tmp_path: Path, write_cifar: Callable[..., Path]
) -> None:
    folder = write_cifar(root=tmp_path, per_file=7)
    data = arrays.cifar10_load(datasets_dir=str(tmp_path))
    assert data.x_train.shape == (35, 32, 32, 3) and data.x_test.shape == (7, 32, 32, 3)
    assert data.x_train.dtype == np.uint8 and data.num_classes == 10
    # Row layout is 1024 red, 1024 green, 1024 blue values; pixel (0, 1) of image 0:
    raw = np.load(folder / "data_batch_1", allow_pickle=True, encoding="bytes")[b"data"][0]
    assert list(data.x_train[0, 0, 1]) == [raw[1], raw[1024 + 1], raw[2048 + 1]]


def test_cifar10_missing_names_the_expected_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as error:
        arrays.cifar10_load(datasets_dir=str(tmp_path))
    message = str(error.value)
    assert f"{tmp_path}/cifar-10-batches-py/data_batch_1..5" in message
    assert "test_batch" in message and "cifar-10-python.tar.gz" in message


def test_npz_upload_loads_and_reports_its_shape(tmp_path: Path) -> None:
    path = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.random((20, 4, 4)),
        y_train=np.arange(20) % 3,
        x_test=rng.random((5, 4, 4)),
        y_test=np.arange(5) % 3,
    )
    summary = catalog.dataset_validate(spec=_spec(dataset=str(path)))
    assert summary["input_shape"] == [4, 4] and summary["num_classes"] == 3
    assert summary["input_dtype"] == "float32"


@pytest.mark.parametrize(
    ("arrays_in", "message"),
    [
        ({"x_train": np.zeros((4, 2)), "y_train": np.zeros(4)}, "missing x_test, y_test"),
        (
            {
                "x_train": np.zeros((4, 2)),
                "y_train": np.zeros(3),
                "x_test": np.zeros((2, 2)),
                "y_test": np.zeros(2),
            },
            "x_train has 4 rows but y_train has 3 labels",
        ),
        (
            {
                "x_train": np.zeros((4, 2)),
                "y_train": np.array([0, 1, 0.5, 1]),
                "x_test": np.zeros((2, 2)),
                "y_test": np.zeros(2),
            },
            "integer class ids",
        ),
        (
            {
                "x_train": np.zeros((4, 2)),
                "y_train": np.zeros(4),
                "x_test": np.zeros((2, 3)),
                "y_test": np.zeros(2),
            },
            "differ from x_test",
        ),
    ],
)
def test_npz_upload_errors_are_clear(
    tmp_path: Path, arrays_in: dict[str, np.ndarray], message: str
) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays_in)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        catalog.dataset_validate(spec=_spec(dataset=str(path)))


def test_an_npz_that_would_inflate_past_the_limit_is_refused_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "bomb.npz"
    zeros = np.zeros((2048, 1024), np.float32)  # 8 MiB of arrays in a file of a few KiB
    np.savez_compressed(path, x_train=zeros, y_train=np.zeros(2048), x_test=zeros[:8],
                        y_test=np.zeros(8))
    assert path.stat().st_size < 100_000
    monkeypatch.setattr(arrays, "NPZ_MAX_BYTES", 4 * 2**20)
    loaded: list[str] = []
    monkeypatch.setattr(np, "load", lambda *a, **k: loaded.append("np.load"))
    with pytest.raises(InvalidInput, match=r"would decompress to 0\.0 GiB of arrays"):
        catalog.dataset_validate(spec=_spec(dataset=str(path)))
    assert loaded == []  # refused from the zip headers alone


def test_an_npz_member_that_fails_its_crc_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.npz"
    marker = np.arange(1000.0, 1008.0)
    np.savez(path, x_train=np.ones((64, 4)), y_train=np.zeros(64), x_test=np.ones((8, 4)),
             y_test=marker)  # stored, not deflated: its bytes appear as they are
    raw = path.read_bytes()
    assert raw.count(marker.tobytes()) == 1
    path.write_bytes(raw.replace(marker.tobytes(), (marker + 1).tobytes()))
    with pytest.raises(InvalidInput, match=r"broken\.npz"):
        arrays.npz_load(path=str(path))


def test_csv_upload_with_named_label_column_and_class_names(tmp_path: Path) -> None:
    path = tmp_path / "iris.csv"
    rows = [f"{i * 0.1:.1f},{i % 7},{['setosa', 'virginica'][i % 2]}" for i in range(20)]
    path.write_text("length,width,species\n" + "\n".join(rows) + "\n")
    data = arrays.csv_load(path=str(path), label_column="species", test_fraction=0.25)
    assert data.input_shape == (2,) and data.num_classes == 2
    assert (len(data.x_train), len(data.x_test)) == (15, 5)
    species = np.concatenate([data.y_train, data.y_test])
    assert sorted(set(species.tolist())) == [0, 1]


@pytest.mark.parametrize(
    ("text", "label", "message"),
    [
        ("a,b\n1,2\n3,4\n", "label", "label column 'label' not in the CSV header (a, b)"),
        ("a,label\n1,0\nx,1\n", "label", "line 3: feature values must be numbers"),
        ("a,label\n1,0\n2\n", "label", "line 3 has 1 fields, the header has 2"),
        ("a,label\n1,0\n", "label", "at least 2 data rows"),
        ("a,label\n1,0\n2,1\n", "", "needs the name of its label column"),
    ],
)
def test_csv_upload_errors_are_clear(tmp_path: Path, text: str, label: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        catalog.dataset_validate(spec=_spec(dataset=str(path), label_column=label))


def test_user_module_checks_without_importing_it(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text("import sys\nsys.exit(3)\n\ndef build_model(hparams):\n    return None\n")
    catalog.model_validate(model=str(good))  # compiled, never executed: no SystemExit
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model(hparams):\n    return keras.Sequential([\n")
    with pytest.raises(InvalidInput, match=r"broken.py line 2: SyntaxError"):
        catalog.model_validate(model=str(broken))
    compiler_only = tmp_path / "outside.py"
    compiler_only.write_text("return 1\n\ndef build_model(hparams):\n    pass\n")
    with pytest.raises(InvalidInput, match="'return' outside function"):
        catalog.model_validate(model=str(compiler_only))
    missing = tmp_path / "missing.py"
    missing.write_text("def build(hparams):\n    pass\n")
    with pytest.raises(InvalidInput, match="must define a top-level function build_model"):
        catalog.model_validate(model=str(missing))
    with pytest.raises(InvalidInput, match="unknown model 'vgg'"):
        catalog.model_validate(model="vgg")


def test_hyperparameters_are_typed_and_defaulted_per_model() -> None:
    resolved = catalog.hyperparameters_resolve(
        model="resnet20", values={"epochs": "3", "scale_batch_size": "false", "my_knob": [1, 2]}
    )
    assert resolved["epochs"] == 3 and resolved["scale_batch_size"] is False
    assert resolved["optimizer"] == "sgd" and resolved["my_knob"] == [1, 2]
    with pytest.raises(InvalidInput, match="batch_size must be int"):
        catalog.hyperparameters_resolve(model="mlp", values={"batch_size": "big"})
    with pytest.raises(InvalidInput, match="optimizer must be one of"):
        catalog.hyperparameters_resolve(model="mlp", values={"optimizer": "lion"})
    with pytest.raises(InvalidInput, match="epochs must be at least 1"):
        catalog.hyperparameters_resolve(model="mlp", values={"epochs": 0})
    with pytest.raises(InvalidInput, match="recurrent_layers must be at least 1"):
        catalog.hyperparameters_resolve(model="gru", values={"recurrent_layers": 0})
    with pytest.raises(InvalidInput, match="hidden_units must be at least 1"):
        catalog.hyperparameters_resolve(model="gru", values={"hidden_units": 0})


@pytest.mark.parametrize("name", sorted(catalog.BOUNDS))
def test_every_number_a_user_sends_is_bounded_on_both_sides(name: str) -> None:
    low, high = catalog.BOUNDS[name]
    kind = catalog.HYPERPARAMETERS[name][0]
    catalog.hyperparameters_resolve(model="mlp", values={name: kind(high)})
    step = 1 if kind is int else 0.001
    for outside in (high + step, low - step, float("nan"), float("inf"), -float("inf")):
        with pytest.raises(InvalidInput, match=f"{name} must be"):
            catalog.hyperparameters_resolve(model="mlp", values={name: outside})


def test_a_throughput_interval_near_zero_is_refused() -> None:
    """A metric row per training step, for every step of every epoch."""
    with pytest.raises(InvalidInput, match=r"throughput_interval_seconds must be at least 0\.5"):
        catalog.hyperparameters_resolve(model="mlp", values={"throughput_interval_seconds": 1e-9})
    with pytest.raises(InvalidInput, match=r"learning_rate must be greater than 0\.0"):
        catalog.hyperparameters_resolve(model="mlp", values={"learning_rate": 0.0})


def test_spec_validation_covers_resources_and_target() -> None:
    assert catalog.spec_validate(spec=_spec())["train_examples"] == 1347
    with pytest.raises(InvalidInput, match="at least one worker"):
        catalog.spec_validate(spec=_spec(resources=Resources(workers=0)))
    with pytest.raises(InvalidInput, match="1 GPU ids granted for 2 GPU slots"):
        catalog.spec_validate(spec=_spec(resources=Resources(gpus_per_worker=2, gpu_ids=(0,))))
    with pytest.raises(InvalidInput, match="a target val_accuracy must be in"):
        catalog.spec_validate(spec=_spec(target_value=1.5))
    with pytest.raises(InvalidInput, match="unknown dataset 'imagenet'"):
        catalog.spec_validate(spec=_spec(dataset="imagenet"))


def test_module_with_build_dataset_needs_no_dataset(tmp_path: Path) -> None:
    module = tmp_path / "own.py"
    module.write_text("def build_dataset(h):\n    pass\n\ndef build_model(h):\n    pass\n")
    summary = catalog.spec_validate(spec=_spec(model=str(module), dataset=""))
    assert summary == {"name": "own.build_dataset"}
