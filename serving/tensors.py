"""TensorProto <-> numpy, with TF's Tensor::FromProto and Tensor::AsProtoField semantics.

Importing this module pulls in TensorFlow's generated protos (and so TensorFlow itself): only
the gRPC paths use it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tensorflow.core.framework import tensor_pb2, types_pb2

DT_FLOAT = types_pb2.DT_FLOAT
DT_DOUBLE = types_pb2.DT_DOUBLE
DT_INT32 = types_pb2.DT_INT32
DT_UINT8 = types_pb2.DT_UINT8
DT_INT16 = types_pb2.DT_INT16
DT_INT8 = types_pb2.DT_INT8
DT_STRING = types_pb2.DT_STRING
DT_COMPLEX64 = types_pb2.DT_COMPLEX64
DT_INT64 = types_pb2.DT_INT64
DT_BOOL = types_pb2.DT_BOOL
DT_BFLOAT16 = types_pb2.DT_BFLOAT16
DT_UINT16 = types_pb2.DT_UINT16
DT_COMPLEX128 = types_pb2.DT_COMPLEX128
DT_HALF = types_pb2.DT_HALF
DT_UINT32 = types_pb2.DT_UINT32
DT_UINT64 = types_pb2.DT_UINT64

# DataTypeString(): the names TF puts in error messages.
DTYPE_NAMES: dict[int, str] = {
    DT_FLOAT: "float",
    DT_DOUBLE: "double",
    DT_INT32: "int32",
    DT_UINT8: "uint8",
    DT_INT16: "int16",
    DT_INT8: "int8",
    DT_STRING: "string",
    DT_COMPLEX64: "complex64",
    DT_INT64: "int64",
    DT_BOOL: "bool",
    DT_BFLOAT16: "bfloat16",
    DT_UINT16: "uint16",
    DT_COMPLEX128: "complex128",
    DT_HALF: "half",
    DT_UINT32: "uint32",
    DT_UINT64: "uint64",
}

_NUMPY: dict[int, Any] = {
    DT_FLOAT: np.float32,
    DT_DOUBLE: np.float64,
    DT_INT32: np.int32,
    DT_UINT8: np.uint8,
    DT_INT16: np.int16,
    DT_INT8: np.int8,
    DT_STRING: object,
    DT_COMPLEX64: np.complex64,
    DT_INT64: np.int64,
    DT_BOOL: np.bool_,
    DT_UINT16: np.uint16,
    DT_COMPLEX128: np.complex128,
    DT_HALF: np.float16,
    DT_UINT32: np.uint32,
    DT_UINT64: np.uint64,
}

# Which repeated field AsProtoField fills for each dtype.
_FIELD: dict[int, str] = {
    DT_FLOAT: "float_val",
    DT_DOUBLE: "double_val",
    DT_INT32: "int_val",
    DT_UINT8: "int_val",
    DT_INT16: "int_val",
    DT_INT8: "int_val",
    DT_UINT16: "int_val",
    DT_STRING: "string_val",
    DT_INT64: "int64_val",
    DT_BOOL: "bool_val",
    DT_HALF: "half_val",
    DT_BFLOAT16: "half_val",
    DT_UINT32: "uint32_val",
    DT_UINT64: "uint64_val",
    DT_COMPLEX64: "scomplex_val",
    DT_COMPLEX128: "dcomplex_val",
}


# dtype_of's lookup: every response tensor passes through it, so no scan over _NUMPY.
_BY_NUMPY: dict[np.dtype[Any], int] = {
    np.dtype(np_type): enum_value for enum_value, np_type in _NUMPY.items() if np_type is not object
}


def dtype_name(dtype: int) -> str:
    return DTYPE_NAMES.get(dtype, types_pb2.DataType.Name(dtype).removeprefix("DT_").lower())


def numpy_dtype(dtype: int) -> Any:
    if dtype == DT_BFLOAT16:
        import tensorflow as tf  # bfloat16 is a TF numpy extension type; load it on demand

        return tf.bfloat16.as_numpy_dtype
    if dtype not in _NUMPY:
        raise ValueError(f"unsupported dtype {dtype_name(dtype)}")
    return _NUMPY[dtype]


def dtype_of(array: np.ndarray) -> int:
    """The DataType enum for a numpy array (object and bytes arrays are DT_STRING)."""
    kind = array.dtype
    if kind.kind in "OSU":
        return DT_STRING
    found = _BY_NUMPY.get(kind)
    if found is not None:
        return found
    if kind.name == "bfloat16":
        return DT_BFLOAT16
    raise ValueError(f"unsupported numpy dtype {kind}")


def _as_bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def to_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray | None:
    """Tensor::FromProto: None where TF would fail to parse the proto."""
    try:
        return _from_proto(proto)
    except (ValueError, TypeError, OverflowError):
        return None


def _from_proto(proto: tensor_pb2.TensorProto) -> np.ndarray | None:
    shape = [dim.size for dim in proto.tensor_shape.dim]
    if any(size < 0 for size in shape) or proto.dtype not in _FIELD:
        return None
    count = math.prod(shape)
    np_type = numpy_dtype(proto.dtype)
    if proto.tensor_content and proto.dtype != DT_STRING:
        if len(proto.tensor_content) != count * np.dtype(np_type).itemsize:
            return None
        return np.frombuffer(proto.tensor_content, dtype=np_type).reshape(shape).copy()
    field = _FIELD[proto.dtype]
    values: list[Any] = list(getattr(proto, field))
    flat: Any
    if proto.dtype == DT_STRING:
        flat = np.empty(len(values), dtype=object)
        flat[:] = values
    elif field == "half_val":
        flat = np.asarray(values, dtype=np.uint16).view(np_type)
    elif field in ("scomplex_val", "dcomplex_val"):
        pairs = np.asarray(values, dtype=np.float64).reshape(-1, 2)
        flat = (pairs[:, 0] + 1j * pairs[:, 1]).astype(np_type)
    else:
        # int_val carries int8..uint16 too; astype truncates like the C++ static_cast.
        wide = np.int64 if field == "int_val" else np_type
        flat = np.asarray(values, dtype=wide).astype(np_type)
    # FromProto: no values means zeros, fewer values repeat the last one, extras are ignored.
    if flat.size == 0:
        filled = np.zeros(count, dtype=np_type) if proto.dtype != DT_STRING else None
        if filled is None:
            filled = np.empty(count, dtype=object)
            filled[:] = b""
        flat = filled
    elif flat.size < count:
        flat = np.concatenate([flat, np.repeat(flat[-1:], count - flat.size)])
    return flat[:count].reshape(shape)


def to_proto(array: Any, *, as_content: bool = False) -> tensor_pb2.TensorProto:
    """Tensor::AsProtoField (or AsProtoTensorContent) for a numpy array or array-like."""
    array = np.asarray(array)
    dtype = dtype_of(array)
    proto = tensor_pb2.TensorProto(dtype=dtype)
    for size in array.shape:
        proto.tensor_shape.dim.add().size = size
    flat = array.ravel()
    if dtype == DT_STRING:
        proto.string_val.extend(_as_bytes(value) for value in flat.tolist())
    elif as_content:
        proto.tensor_content = np.ascontiguousarray(flat).tobytes()
    elif _FIELD[dtype] == "half_val":
        proto.half_val.extend(flat.view(np.uint16).tolist())
    elif dtype in (DT_COMPLEX64, DT_COMPLEX128):
        pairs = np.stack([flat.real, flat.imag], axis=-1).ravel()
        getattr(proto, _FIELD[dtype]).extend(pairs.tolist())
    else:
        getattr(proto, _FIELD[dtype]).extend(flat.tolist())
    return proto
