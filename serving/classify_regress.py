"""Classify and Regress around a session run: TF Serving's classifier.cc, regressor.cc and
InputToSerializedExampleTensor from util.cc, with their validation messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorflow_serving.apis import input_pb2

from serving import tensors as T
from serving.errors import invalid_argument

Classes = list[tuple[str, float]]


def _shape(array: np.ndarray) -> str:
    return "[" + ",".join(str(size) for size in array.shape) + "]"


def _dtype_enum_name(array: np.ndarray) -> str:
    return "DT_" + T.dtype_name(T.dtype_of(array)).upper()


def serialized_examples(request_input: input_pb2.Input) -> np.ndarray:
    """InputToSerializedExampleTensor: a 1-D string tensor of serialized tf.Examples."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        serialized = [e.SerializeToString() for e in request_input.example_list.examples]
    elif kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        # Concatenated protos merge on parse, so each example inherits the context features.
        context = listed.context.SerializeToString()
        serialized = [context + e.SerializeToString() for e in listed.examples]
    else:
        serialized = []
    if not serialized:
        raise invalid_argument("Input is empty.")
    array: Any = np.empty(len(serialized), dtype=object)
    array[:] = serialized
    return array


def _check_class_tensor(array: np.ndarray, name: str, dtype_enum: str, count: int) -> None:
    if array.ndim != 2:
        raise invalid_argument(
            f"Expected Tensor shape: [batch_size num_classes] but got {_shape(array)}"
        )
    if _dtype_enum_name(array) != dtype_enum:
        raise invalid_argument(
            f"Expected {name} Tensor of {dtype_enum}. Got: {_dtype_enum_name(array)}"
        )
    if array.shape[0] != count:
        raise invalid_argument(
            f"Expected {name} output batch size of {count}. Got: {array.shape[0]}"
        )


def classifications(
    classes: np.ndarray | None, scores: np.ndarray | None, count: int
) -> list[Classes]:
    """PostProcessClassificationResult."""
    if classes is not None:
        _check_class_tensor(classes, "classes", "DT_STRING", count)
    if scores is not None:
        _check_class_tensor(scores, "scores", "DT_FLOAT", count)
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise invalid_argument(
            "Tensors class and score should match in dim_size(1). Got "
            f"{classes.shape[1]} vs. {scores.shape[1]}"
        )
    width = (classes if classes is not None else scores).shape[1]  # type: ignore[union-attr]
    result = []
    for row in range(count):
        result.append(
            [
                (
                    _label(classes[row, c]) if classes is not None else "",
                    float(scores[row, c]) if scores is not None else 0.0,
                )
                for c in range(width)
            ]
        )
    return result


def _label(value: Any) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return raw.decode("utf-8", "replace")  # proto string fields must hold valid UTF-8


def regressions(output: np.ndarray, count: int) -> list[float]:
    """PostProcessRegressionResult."""
    if not (output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1)):
        raise invalid_argument(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{_shape(output)}"
        )
    if output.shape[0] != count:
        raise invalid_argument(
            f"Input batch size did not match output batch size: {count} vs. {output.shape[0]}"
        )
    if _dtype_enum_name(output) != "DT_FLOAT":
        raise invalid_argument(
            f"Expected output Tensor of DT_FLOAT.  Got: {_dtype_enum_name(output)}"
        )
    if output.size != count:
        raise invalid_argument(f"Expected output batch size to be {count}.  Got: {output.size}")
    return [float(value) for value in output.ravel()]
