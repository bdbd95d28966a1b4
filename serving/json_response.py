"""TF Serving's REST response JSON, ported from tensorflow_serving/util/json_tensor.cc.

Numbers are written the way TF Serving writes them (shortest text that round-trips at the
tensor's own precision, whole numbers with ".0"), string tensors whose name ends in "_bytes"
as {"b64": ...}, all through rapidjson's pretty layout.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from serving import tensors as T
from serving.errors import invalid_argument
from serving.rjson import PrettyWriter

_BYTES_SUFFIX = "_bytes"
_INTEGER_DTYPES = (
    T.DT_INT32,
    T.DT_INT16,
    T.DT_INT8,
    T.DT_UINT8,
    T.DT_INT64,
    T.DT_UINT32,
    T.DT_UINT64,
)


def write_decimal(writer: PrettyWriter, value: float, *, single: bool) -> None:
    """WriteDecimal: shortest %g that round-trips at the tensor's own precision, plus '.0'."""
    if math.isnan(value):
        writer.raw("NaN")
        return
    if math.isinf(value):
        writer.raw("-Infinity" if value < 0 else "Infinity")
        return
    text = f"{value:g}"
    parse = np.float32 if single else float
    if parse(text) != parse(value):
        text = f"{value:.9g}" if single else f"{value:.17g}"
    if "." not in text and "e" not in text:
        text += ".0"
    writer.raw(text)


def _write_scalar(writer: PrettyWriter, value: Any, dtype: int, as_bytes: bool) -> None:
    """AddSingleValueAndAdvance."""
    if dtype in (T.DT_FLOAT, T.DT_DOUBLE):
        write_decimal(writer, float(value), single=dtype == T.DT_FLOAT)
    elif dtype == T.DT_BOOL:
        writer.raw("true" if value else "false")
    elif dtype in _INTEGER_DTYPES:
        writer.raw(str(int(value)))
    elif dtype == T.DT_STRING:
        raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
        if as_bytes:
            writer.start_object()
            writer.key("b64")
            writer.string(base64.b64encode(raw).decode("ascii"))
            writer.end_object()
        else:
            writer.string(raw.decode("utf-8", "surrogateescape"))
    else:
        raise invalid_argument(f"Failed to write JSON value for tensor type: {T.dtype_name(dtype)}")


def _write_values(writer: PrettyWriter, array: Any, dtype: int, as_bytes: bool) -> None:
    """AddTensorValues: nested arrays, scalars bare."""
    if isinstance(array, np.ndarray) and array.ndim == 0:
        array = array[()]
    if not isinstance(array, np.ndarray):
        _write_scalar(writer, array, dtype, as_bytes)
        return
    writer.start_array()
    for item in array:
        if array.ndim == 1:
            _write_scalar(writer, item, dtype, as_bytes)
        else:
            _write_values(writer, item, dtype, as_bytes)
    writer.end_array()


def _is_bytes_tensor(name: str, dtype: int) -> bool:
    return dtype == T.DT_STRING and name.endswith(_BYTES_SUFFIX)


def predict_json(outputs: Mapping[str, np.ndarray], *, row_format: bool) -> bytes:
    """MakeJsonFromTensors: {"predictions": rows} or {"outputs": columns}."""
    if not outputs:
        raise invalid_argument("Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    dtypes = {name: T.dtype_of(outputs[name]) for name in names}
    many = len(names) > 1
    writer = PrettyWriter()
    writer.start_object()
    if row_format:
        batch = -1
        for name in names:
            if outputs[name].ndim == 0:
                raise invalid_argument(f"Tensor name: {name} has no shape information ")
            size = outputs[name].shape[0]
            if batch >= 0 and size != batch:
                raise invalid_argument(
                    f"Tensor name: {name} has inconsistent batch size: {size} expecting: {batch}"
                )
            batch = size
        writer.key("predictions")
        writer.start_array()
        for row in range(batch):
            if many:
                writer.start_object()
            writer.single_line_arrays = True
            for name in names:
                if many:
                    writer.key(name)
                as_bytes = _is_bytes_tensor(name, dtypes[name])
                _write_values(writer, outputs[name][row], dtypes[name], as_bytes)
            writer.single_line_arrays = False
            if many:
                writer.end_object()
        writer.end_array()
    else:
        writer.key("outputs")
        if many:
            writer.start_object()
        for name in names:
            if many:
                writer.key(name)
            _write_values(writer, outputs[name], dtypes[name], _is_bytes_tensor(name, dtypes[name]))
        if many:
            writer.end_object()
    writer.end_object()
    return writer.text().encode("utf-8", "surrogateescape")


def classify_json(classifications: Sequence[Sequence[tuple[str, float]]]) -> bytes:
    """MakeJsonFromClassificationResult: {"results": [[[label, score], ...], ...]}."""
    if not classifications:
        raise invalid_argument("Cannot convert empty ClassificationResults to JSON")
    writer = PrettyWriter()
    writer.start_object()
    writer.key("results")
    writer.start_array()
    for classes in classifications:
        writer.single_line_arrays = True
        writer.start_array()
        for label, score in classes:
            writer.start_array()
            writer.string(label)
            write_decimal(writer, score, single=True)
            writer.end_array()
        writer.end_array()
        writer.single_line_arrays = False
    writer.end_array()
    writer.end_object()
    return writer.text().encode("utf-8", "surrogateescape")


def regress_json(values: Sequence[float]) -> bytes:
    """MakeJsonFromRegressionResult: {"results": [value, ...]}."""
    if not values:
        raise invalid_argument("Cannot convert empty RegressionResults to JSON")
    writer = PrettyWriter()
    writer.start_object()
    writer.key("results")
    writer.single_line_arrays = True
    writer.start_array()
    for value in values:
        write_decimal(writer, value, single=True)
    writer.end_array()
    writer.end_object()
    return writer.text().encode("utf-8", "surrogateescape")
