"""Input pipelines and zoo models in-process (one TF import for the module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.arrays import ArrayData, digits_load, digits_table, synthetic_images_load
from training.catalog import hyperparameters_resolve

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tf_modules() -> tuple[Any, Any]:
    from training.data import array_pipelines as datasets
    from training.trial import zoo

    return datasets, zoo


def test_the_digits_read_from_scikit_learns_file_are_what_its_loader_gives() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    table = digits_table()
    np.testing.assert_array_equal(table[:, :-1], bunch.data)
    np.testing.assert_array_equal(table[:, -1].astype(np.int64), bunch.target)
    # Read from the file, not through the loader: a trial that loads the digits never imports
    # scikit-learn (the test process has by now; a fresh one shows it).
    code = ("import sys; from training.arrays import digits_load; data = digits_load(); "
            "print(len(data.x_train) + len(data.x_test), 'sklearn' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.split() == ["1797", "False"]


def test_training_pipeline_keeps_raw_inputs_and_fixed_batches(tf_modules: tuple[Any, Any]) -> None:
    datasets, _ = tf_modules
    data = digits_load()
    train = datasets.dataset_train(data=data, batch_size=64, seed=1, augment=False)
    first, second = [(x.numpy(), y.numpy()) for x, y in train.take(2)]
    assert first[0].shape == (64, 64) and first[0].dtype == np.float32
    assert first[0].max() <= 16.0 and first[1].dtype == np.int32
    assert not np.array_equal(first[0], second[0])
    rows = {tuple(r) for r in data.x_train.tolist()}
    assert all(tuple(r) in rows for r in first[0].tolist())  # shuffled, never rescaled


def _numbered(examples: int) -> ArrayData:
    """Rows that are their own ids, so a batch says which examples it holds."""
    x = np.arange(examples, dtype=np.float32).reshape(-1, 1)
    return ArrayData("ids", x, np.arange(examples) % 3, x[:2], np.arange(2), num_classes=3)


def _ids(train: Any, steps: int) -> list[list[int]]:
    return [x.numpy()[:, 0].astype(int).tolist() for x, _ in train.take(steps)]


def _joined(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def test_an_epoch_visits_each_example_once_in_an_order_set_by_seed_and_epoch(
    tf_modules: tuple[Any, Any],
) -> None:
    datasets, _ = tf_modules
    data, batch = _numbered(50), 8
    steps = datasets.steps_per_epoch(examples=50, global_batch=batch)
    batches = _ids(datasets.dataset_train(data=data, batch_size=batch, seed=3, augment=False),
                   3 * steps)
    epochs = [_joined(batches[e * steps:(e + 1) * steps]) for e in range(3)]
    for ids in epochs:
        # 48 of the 50, each once: the remainder of a global batch is dropped, not carried over.
        assert len(ids) == len(set(ids)) == steps * batch and set(ids) <= set(range(50))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]  # reshuffled every epoch
    again = _ids(datasets.dataset_train(data=data, batch_size=batch, seed=3, augment=False),
                 steps)
    other = _ids(datasets.dataset_train(data=data, batch_size=batch, seed=4, augment=False),
                 steps)
    assert _joined(again) == epochs[0] and _joined(other) != epochs[0]


@pytest.mark.parametrize(("epoch", "step"), [(0, 3), (1, 0), (2, 5)])
def test_a_pipeline_started_at_an_epoch_and_step_yields_what_the_uninterrupted_one_yields(
    tf_modules: tuple[Any, Any], epoch: int, step: int,
) -> None:
    datasets, _ = tf_modules
    data, batch = _numbered(50), 8
    steps = datasets.steps_per_epoch(examples=50, global_batch=batch)
    whole = _ids(datasets.dataset_train(data=data, batch_size=batch, seed=3, augment=False),
                 4 * steps)
    resumed = datasets.dataset_train(data=data, batch_size=batch, seed=3, augment=False,
                                     start_epoch=epoch, start_step=step)
    at = epoch * steps + step
    assert _ids(resumed, 4 * steps - at) == whole[at:]


def test_eval_pipeline_visits_every_test_example_once(tf_modules: tuple[Any, Any]) -> None:
    datasets, _ = tf_modules
    data = digits_load()
    batches = datasets.dataset_eval(data=data, batch_size=64)
    labels = np.concatenate([y.numpy() for _, y in batches])
    np.testing.assert_array_equal(labels, data.y_test)
    assert datasets.steps_per_epoch(examples=1347, global_batch=64) == 21


def test_augmentation_keeps_image_dtype_and_shape(tf_modules: tuple[Any, Any]) -> None:
    datasets, _ = tf_modules
    data = synthetic_images_load(train_size=16, test_size=4)
    train = datasets.dataset_train(data=data, batch_size=8, seed=0, augment=True)
    images, _ = next(iter(train))
    assert images.dtype.name == "uint8" and images.shape == (8, 32, 32, 3)


@pytest.mark.parametrize(("name", "params"), [("resnet20", 272_000), ("cifar10_cnn", 1_250_000)])
def test_zoo_image_models_take_uint8_images(
    tf_modules: tuple[Any, Any], name: str, params: int
) -> None:
    _, zoo = tf_modules
    data = synthetic_images_load(train_size=8, test_size=2)
    hparams = hyperparameters_resolve(model=name, values={})
    model = zoo.ZOO_BUILDERS[name](hparams=hparams, data=data)
    assert model.output_shape == (None, 10)
    assert abs(model.count_params() - params) / params < 0.05
    probabilities = model(data.x_test.astype(np.float32), training=False).numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_mlp_standardises_tabular_features_inside_the_model(tf_modules: tuple[Any, Any]) -> None:
    _, zoo = tf_modules
    rng = np.random.default_rng(0)
    x = rng.normal(1000.0, 50.0, (32, 3)).astype(np.float32)
    data = ArrayData("t", x, np.arange(32) % 2, x[:4], np.arange(4) % 2, num_classes=2)
    model = zoo.mlp_build(hparams=hyperparameters_resolve(model="mlp", values={}), data=data)
    normalised = model.layers[1](x).numpy()
    assert abs(float(normalised.mean())) < 1e-3 and abs(float(normalised.std()) - 1) < 1e-2


def test_gru_reads_flat_features_one_per_step_and_images_one_row_per_step(
    tf_modules: tuple[Any, Any]
) -> None:
    _, zoo = tf_modules
    hparams = hyperparameters_resolve(model="gru", values={"hidden_units": 16})
    digits = digits_load()
    flat = zoo.gru_build(hparams=hparams, data=digits)
    assert flat.get_layer(index=1).output_shape == (None, 64, 1)
    standardised = flat.get_layer(index=2)(digits.x_train.reshape(-1, 64, 1)).numpy()
    assert abs(float(standardised.mean())) < 1e-3 and abs(float(standardised.std()) - 1) < 1e-2

    images = synthetic_images_load(train_size=8, test_size=2)
    rows = zoo.gru_build(hparams=hparams, data=images)
    assert rows.get_layer(index=1).output_shape == (None, 32, 96)
    probabilities = rows(images.x_test.astype(np.float32), training=False).numpy()
    assert probabilities.shape == (2, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
