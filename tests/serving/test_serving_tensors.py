"""TensorProto <-> numpy: every supported dtype round-trips, in both encodings."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from serving import tensors as T

NUMERIC = [np.float32, np.float64, np.int32, np.uint8, np.int16, np.int8, np.int64, np.bool_,
           np.uint16, np.float16, np.uint32, np.uint64, np.complex64, np.complex128]


@pytest.mark.parametrize("np_type", NUMERIC, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("as_content", [False, True], ids=["fields", "content"])
def test_numeric_dtypes_round_trip(np_type: type, as_content: bool) -> None:
    array = (np.arange(6) % 2 if np_type is np.bool_ else np.arange(6)).astype(np_type)
    array = array.reshape(2, 3)
    proto = T.to_proto(array, as_content=as_content)
    assert proto.dtype == tf.as_dtype(array.dtype).as_datatype_enum
    back = T.to_ndarray(proto)
    assert back is not None
    assert back.dtype == array.dtype
    np.testing.assert_array_equal(back, array)


def test_bfloat16_strings_scalars_and_empty_tensors_round_trip() -> None:
    bfloat = np.array([1.5, -2.0], dtype=tf.bfloat16.as_numpy_dtype)
    assert T.to_proto(bfloat).dtype == T.DT_BFLOAT16
    np.testing.assert_array_equal(T.to_ndarray(T.to_proto(bfloat)), bfloat)
    strings = np.array([b"a", "b\u00e9"], dtype=object)
    assert list(T.to_ndarray(T.to_proto(strings))) == [b"a", "b\u00e9".encode()]
    scalar = T.to_ndarray(T.to_proto(np.float32(2.5), as_content=True))
    assert scalar is not None and scalar.shape == () and scalar == np.float32(2.5)
    empty = T.to_ndarray(T.to_proto(np.zeros((0, 3), np.float32), as_content=True))
    assert empty is not None and empty.shape == (0, 3)


def test_unsupported_numpy_dtypes_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported numpy dtype"):
        T.to_proto(np.array(["2026-11-22"], dtype="datetime64[D]"))


def test_tensor_content_of_the_wrong_length_does_not_parse() -> None:
    proto = T.to_proto(np.zeros((2, 3), np.float32), as_content=True)
    proto.tensor_content = proto.tensor_content[:-4]
    assert T.to_ndarray(proto) is None
