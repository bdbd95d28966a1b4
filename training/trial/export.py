"""Exports the trained model as a SavedModel for TF Serving, and proves it matches Keras.

The export is a plain copy of the model built outside any strategy (no mirrored or remote
variables, no collectives), with the trained weights set on it. Its `serving_default` signature
takes the dataset's raw rows (preprocessing is inside the model, so clients send data exactly as the
dataset stores it): one input "inputs" of the dataset's dtype and shape, or, for a dataset of
several named inputs, one input per name.

What it returns depends on who compiled the model:
- the platform (a classifier): "probabilities" float32 (-1, num_classes) and "class_id" int64 (-1,);
- the module (any task): the model's own outputs, by their names ("outputs" for a single one),
  floating point ones as float32 (a mixed-precision model computes in float16).

The SavedModel is written beside the target and renamed into place, so `export/` is never half
written; the served outputs must equal Keras' on the same rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from training.arrays import ArrayData
from training.data.inputs import Data
from training.trial.tfenv import tf

TOLERANCE = 1e-5
# A mixed-precision model's served outputs may differ from Keras' by its compute dtype's rounding:
# the SavedModel's graph and Keras' eager call can take different kernels (oneDNN picks AMX or
# AVX512-BF16 ones by CPU), each rounding once more or less. A few ulps, never more.
ULPS = 4
EPSILON = {"bfloat16": 2.0**-7, "float16": 2.0**-10}
CHECK_ROWS = 64


def _tolerance(*, model: Any) -> float:
    compute = str(getattr(model, "compute_dtype", "float32"))
    return max(TOLERANCE, ULPS * EPSILON.get(compute, 0.0))


def _input_specs(*, data: Data) -> dict[str, Any]:
    if isinstance(data, ArrayData):
        return {"inputs": tf.TensorSpec((None, *data.input_shape), tf.as_dtype(data.x_train.dtype),
                                        name="inputs")}
    specs = data.x_spec if isinstance(data.x_spec, dict) else {"inputs": data.x_spec}
    return {name: tf.TensorSpec((None, *spec.shape), spec.dtype, name=name)
            for name, spec in specs.items()}


def _sample(*, data: Data) -> dict[str, np.ndarray]:
    if isinstance(data, ArrayData):
        return {"inputs": data.x_test[:CHECK_ROWS]}
    sample = data.sample if isinstance(data.sample, dict) else {"inputs": data.sample}
    return {name: np.asarray(values)[:CHECK_ROWS] for name, values in sample.items()}


def _outputs(*, model: Any, produced: Any) -> dict[str, Any]:
    if isinstance(produced, dict):
        named = dict(produced)
    elif isinstance(produced, list | tuple):
        names = list(getattr(model, "output_names", None) or [])
        if len(names) != len(produced):
            names = [f"output_{i}" for i in range(len(produced))]
        named = dict(zip(names, produced, strict=True))
    else:
        named = {"outputs": produced}
    return {name: tf.cast(t, tf.float32) if t.dtype.is_floating else t
            for name, t in named.items()}


def _forward(*, model: Any, specs: dict[str, Any], inputs: dict[str, Any]) -> Any:
    if list(specs) == ["inputs"]:
        model_inputs = getattr(model, "inputs", None)
        dtype = model_inputs[0].dtype if model_inputs else tf.float32
        return model(tf.cast(inputs["inputs"], dtype), training=False)
    return model(inputs, training=False)


def export_saved_model(*, model: Any, data: Data, export_dir: str, classifier: bool,
                       from_logits: bool) -> dict[str, Any]:
    specs = _input_specs(data=data)

    @tf.function(input_signature=[specs])
    def serve(inputs: dict[str, Any]) -> dict[str, Any]:
        produced = _forward(model=model, specs=specs, inputs=inputs)
        if not classifier:
            return _outputs(model=model, produced=produced)
        probabilities = tf.nn.softmax(produced) if from_logits else produced
        return {
            "probabilities": tf.cast(probabilities, tf.float32),
            "class_id": tf.argmax(probabilities, axis=-1, output_type=tf.int64),
        }

    module = tf.Module()
    module.model = model
    module.serve = serve
    target = Path(export_dir)
    scratch = target.with_name(target.name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        tf.saved_model.save(module, str(scratch), signatures={"serving_default": serve})
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)  # half a model, on a disk that may be full
        raise
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)

    sample = _sample(data=data)
    expected = serve.python_function({k: tf.constant(v) for k, v in sample.items()})
    signature = tf.saved_model.load(str(target)).signatures["serving_default"]
    served = signature(**{k: tf.constant(v) for k, v in sample.items()})
    difference = 0.0
    for name, value in expected.items():
        want, got = np.asarray(value), np.asarray(served[name])
        if want.dtype.kind == "f":
            scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
            difference = max(difference, float(np.max(np.abs(got - want), initial=0.0)) / scale)
        elif not classifier and not np.array_equal(want, got):  # class_id may tie
            difference = float("inf")
    if difference > _tolerance(model=model):
        raise RuntimeError(f"exported model disagrees with Keras by {difference:g}")
    return {
        "path": str(target),
        "signature": "serving_default",
        "inputs": {name: {"dtype": spec.dtype.name, "shape": [-1, *_dims(spec.shape[1:])]}
                   for name, spec in specs.items()},
        "outputs": {name: {"dtype": spec.dtype.name, "shape": _dims(spec.shape)}
                    for name, spec in signature.structured_outputs.items()},
        "max_abs_difference_vs_keras": difference,
    }


def _dims(shape: Any) -> list[int]:
    return [-1 if d is None else int(d) for d in shape]
