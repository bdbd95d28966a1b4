"""Builds and compiles the trial's model: a zoo model or the user's `build_model(hparams)`.

User modules are plain .py files loaded by path with importlib. `build_model` receives the
resolved hyperparameters plus `input_shape` (list) and `num_classes` of the dataset, and must return
a tf-keras model (`import tf_keras as keras`, or `tf.keras` which the trial maps to tf-keras).
An optional `build_dataset(hparams)` returns (x_train, y_train, x_test, y_test) arrays.

Anything wrong on the user's side (import error, exception in build_model, output shape that does
not match the dataset) raises `UserCodeError` *before* training, so bad modules fail in seconds and
are never retried. The platform compiles the model unless the module already did.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from training import catalog
from training.arrays import ArrayData
from training.data.inputs import Data
from training.errors import InvalidInput, UserCodeError, traceback_tail
from training.scaling import BatchPlan
from training.spec import TrialSpec
from training.trial.tfenv import keras, tf
from training.trial.zoo import ZOO_BUILDERS


def user_module_load(*, path: str) -> ModuleType:
    try:
        catalog.user_module_validate(path=path)
    except InvalidInput as exc:
        raise UserCodeError(str(exc)) from exc
    # A name unique per file content, so two trials in one process never share a cached module.
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    name = f"user_model_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserCodeError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserCodeError(f"importing {Path(path).name} failed:\n{traceback_tail(exc)}") from exc
    return module


def model_hparams(*, hparams: dict[str, Any], data: Data) -> dict[str, Any]:
    extra: dict[str, Any] = {"num_classes": data.num_classes}
    if isinstance(data, ArrayData):
        extra["input_shape"] = list(data.input_shape)
        extra["input_specs"] = {"inputs": {"dtype": str(data.x_train.dtype),
                                           "shape": list(data.input_shape)}}
    else:
        specs = data.input_specs()
        extra["input_specs"] = specs
        if list(specs) == ["inputs"]:
            extra["input_shape"] = specs["inputs"]["shape"]
    return {**hparams, **extra}


def _inputs_check(*, model: Any, data: Data) -> Any:
    """The model's output for a couple of the dataset's rows, or a UserCodeError saying why not."""
    if isinstance(data, ArrayData):
        shape = (None, *data.input_shape)
        try:
            if not model.built:
                model.build(shape)
            return model.compute_output_shape(shape)
        except Exception as exc:
            raise UserCodeError(
                f"the model cannot take inputs of shape {shape} from dataset "
                f"{data.name}:\n{traceback_tail(exc)}"
            ) from exc
    rows = tf.nest.map_structure(lambda a: tf.constant(a[:2]), data.sample)
    try:
        outputs = model(rows, training=False)
    except Exception as exc:
        raise UserCodeError(
            f"the model cannot take the inputs of dataset {data.name} "
            f"({data.input_specs()}):\n{traceback_tail(exc)}"
        ) from exc
    return tf.nest.map_structure(lambda t: tf.TensorShape([None, *t.shape[1:]]), outputs)


def model_check(*, model: Any, data: Data) -> None:
    """The model must accept the dataset's rows; one the platform compiles (as a classifier)
    must also emit one score per class."""
    if not isinstance(model, keras.Model):
        raise UserCodeError(
            f"build_model must return a tf-keras model (import tf_keras as keras), "
            f"got {type(model).__module__}.{type(model).__name__}"
        )
    output_shape = _inputs_check(model=model, data=data)
    if model._is_compiled:
        return  # the module chose its own loss: any outputs its loss accepts
    classes = data.num_classes
    shape = tuple(output_shape) if isinstance(output_shape, tuple | tf.TensorShape) else None
    if shape is None or len(shape) != 2 or (classes is not None and shape[-1] != classes):
        wanted = f"(batch, {classes})" if classes is not None else "(batch, classes)"
        raise UserCodeError(
            f"wrong output shape: the model outputs {output_shape}, but a model the platform "
            f"compiles is a classifier of dataset {data.name}'s {classes or 'integer'} classes, "
            f"so its last layer must output {wanted}; for regression, several outputs or "
            "another loss, compile the model in build_model with your loss and metrics"
        )
    if not data.y_spec_integer():
        raise UserCodeError(
            f"dataset {data.name} has {data.y_dtype_name()} labels, but a model the platform "
            "compiles is a classifier of integer class ids; compile the model in build_model "
            "with the loss your labels need (e.g. loss='mse', metrics=['mae'] for regression)"
        )


def model_build(*, spec: TrialSpec, hparams: dict[str, Any], data: Data,
                module: ModuleType | None) -> Any:
    """A fresh model; called in the strategy scope for training and outside it for export."""
    if module is None:
        if data.num_classes is None:
            raise UserCodeError(
                f"the built-in model {spec.model} is a classifier, and dataset {data.name} "
                "names no classes: register it with num_classes, or bring a model module"
            )
        return ZOO_BUILDERS[spec.model](hparams=hparams, data=data)
    try:
        model = module.build_model(model_hparams(hparams=hparams, data=data))
    except Exception as exc:
        raise UserCodeError(f"build_model failed:\n{traceback_tail(exc)}") from exc
    model_check(model=model, data=data)
    return model


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear ramp from the single-replica rate to the scaled one (see scaling.py)."""

    def __init__(self, *, base: float, target: float, warmup_steps: int) -> None:
        self.base, self.target, self.warmup_steps = base, target, warmup_steps

    def __call__(self, step: Any) -> Any:
        if self.warmup_steps <= 0:
            return tf.constant(self.target, tf.float32)
        fraction = tf.minimum(1.0, tf.cast(step, tf.float32) / float(self.warmup_steps))
        return self.base + (self.target - self.base) * fraction

    def get_config(self) -> dict[str, Any]:
        return {"base": self.base, "target": self.target, "warmup_steps": self.warmup_steps}


def optimizer_make(*, hparams: dict[str, Any], batch: BatchPlan, steps_per_epoch: int) -> Any:
    rate = WarmupSchedule(base=batch.base_learning_rate, target=batch.learning_rate,
                          warmup_steps=batch.warmup_epochs * steps_per_epoch)
    name, momentum = hparams["optimizer"], hparams["momentum"]
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=rate, momentum=momentum)
    if name == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate=rate, momentum=momentum)
    if name == "adagrad":
        return keras.optimizers.Adagrad(learning_rate=rate)
    return keras.optimizers.Adam(learning_rate=rate)


def learning_rate_current(*, model: Any) -> float:
    """The rate the optimizer applies at its current step, whatever schedule produces it."""
    optimizer = model.optimizer
    rate = optimizer.learning_rate
    if callable(rate) and not hasattr(rate, "numpy"):
        rate = rate(optimizer.iterations)
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)


def model_compile(*, model: Any, hparams: dict[str, Any], batch: BatchPlan, steps_per_epoch: int,
                  exact_evaluation: bool) -> bool:
    """Compiles unless the user did; returns whether the platform's optimizer/LR rule is in use."""
    if model._is_compiled:
        return False
    model.compile(
        optimizer=optimizer_make(hparams=hparams, batch=batch, steps_per_epoch=steps_per_epoch),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=hparams["from_logits"]),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        # Parameter-server evaluation visits every test example exactly once when sharded.
        pss_evaluation_shards="auto" if exact_evaluation else 0,
    )
    return True
