"""Exports the trained model as a SavedModel for TF Serving, and proves it matches Keras.

The export is a plain copy of the model built outside any strategy (no mirrored or remote
variables, no collectives), with the trained weights set on it. Its `serving_default` signature:

    inputs:  "inputs"        dtype and shape of the dataset's raw rows (e.g. uint8 (-1,32,32,3))
    outputs: "probabilities" float32 (-1, num_classes)
             "class_id"      int64 (-1,)

Preprocessing is inside the model, so clients send data exactly as the dataset stores it. The
SavedModel is written beside the target and renamed into place, so `export/` is never half written.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from training.arrays import ArrayData
from training.tfenv import tf

TOLERANCE = 1e-5


def export_saved_model(*, model: Any, data: ArrayData, export_dir: str, from_logits: bool
                       ) -> dict[str, Any]:
    raw_dtype = tf.as_dtype(data.x_train.dtype)
    inputs = getattr(model, "inputs", None)
    model_dtype = inputs[0].dtype if inputs else tf.float32

    @tf.function(input_signature=[
        tf.TensorSpec((None, *data.input_shape), raw_dtype, name="inputs")
    ])
    def serve(raw: Any) -> dict[str, Any]:
        scores = model(tf.cast(raw, model_dtype), training=False)
        probabilities = tf.nn.softmax(scores) if from_logits else scores
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

    sample = data.x_test[:64]
    expected = serve_expected(model=model, sample=sample, from_logits=from_logits)
    served = tf.saved_model.load(str(target)).signatures["serving_default"](
        inputs=tf.constant(sample)
    )["probabilities"].numpy()
    difference = float(np.max(np.abs(served - expected)))
    if difference > TOLERANCE:
        raise RuntimeError(f"exported model disagrees with Keras by {difference:g}")
    return {
        "path": str(target),
        "signature": "serving_default",
        "inputs": {"inputs": {"dtype": raw_dtype.name, "shape": [-1, *data.input_shape]}},
        "outputs": {
            "probabilities": {"dtype": "float32", "shape": [-1, data.num_classes]},
            "class_id": {"dtype": "int64", "shape": [-1]},
        },
        "max_abs_difference_vs_keras": difference,
    }


def serve_expected(*, model: Any, sample: np.ndarray, from_logits: bool) -> np.ndarray:
    # Keras' own forward pass on the same raw rows (it casts to the model's input dtype itself).
    scores = model(tf.constant(sample.astype(np.float32)), training=False)
    return np.asarray(tf.nn.softmax(scores) if from_logits else scores)
