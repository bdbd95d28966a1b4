"""TF Serving's REST request JSON, ported from tensorflow_serving/util/json_tensor.cc.

Validation order and error texts follow the C++ code so REST clients get the same 400 bodies
from the embedded server as from tensorflow/serving.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow_serving.apis import input_pb2

from serving import tensors as T
from serving.errors import Code, ServingError, invalid_argument
from serving.rjson import debug_string, json_type_name

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UINT32 = (0, 2**32 - 1)
_UINT64 = (0, 2**64 - 1)


@dataclass(frozen=True)
class PredictJson:
    signature_name: str
    row_format: bool  # "instances" (row) vs "inputs" (columnar) decides the answer's shape
    inputs: dict[str, np.ndarray]


def _is_int(value: Any, bounds: tuple[int, int]) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, float) or _is_int(value, (-(2**63), 2**64 - 1))


def _type_error(value: Any, dtype: int) -> ServingError:
    return invalid_argument(
        f"JSON Value: {debug_string(value)} Type: {json_type_name(value)} "
        f"is not of expected type: {T.dtype_name(dtype)}"
    )


def _format_error(value: Any, text: str) -> ServingError:
    return invalid_argument(f"JSON Value: {debug_string(value)} {text}")


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _decode_b64(value: Any) -> bytes:
    if not _is_b64(value):
        raise invalid_argument(
            f"JSON Value: {debug_string(value)} not formatted correctly for base64 data"
        )
    text = value["b64"].strip()
    try:
        # absl::Base64Unescape accepts unpadded input too.
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid_argument("Unable to base64 decode") from exc


def _scalar(value: Any, dtype: int) -> Any:
    """AddValueToTensor: type-checks one JSON scalar for the signature's dtype."""
    if dtype in (T.DT_FLOAT, T.DT_DOUBLE):
        ok = _is_number(value)
    elif dtype in (T.DT_INT32, T.DT_INT16, T.DT_INT8, T.DT_UINT8):
        ok = _is_int(value, _INT32)
    elif dtype == T.DT_INT64:
        ok = _is_int(value, _INT64)
    elif dtype == T.DT_UINT32:
        ok = _is_int(value, _UINT32)
    elif dtype == T.DT_UINT64:
        ok = _is_int(value, _UINT64)
    elif dtype == T.DT_BOOL:
        ok = isinstance(value, bool)
    elif dtype == T.DT_STRING:
        return _string_bytes(value, dtype)
    else:
        raise ServingError(
            Code.UNIMPLEMENTED,
            f"Conversion of JSON Value: {debug_string(value)} to type: {T.dtype_name(dtype)}",
        )
    if not ok:
        raise _type_error(value, dtype)
    return value


def _string_bytes(value: Any, dtype: int) -> bytes:
    if not isinstance(value, str):
        raise _type_error(value, dtype)
    return value.encode("utf-8", "surrogatepass")


def _dense_shape(value: Any) -> list[int]:
    """GetDenseTensorShape: the shape implied by following the first element of each list."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value: Any, level: int, dtype: int, shape: list[int], out: list[Any]) -> None:
    """FillTensorProto: checks that the nested lists are dense and typed, collecting values."""
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid_argument(
                f"JSON Value: {debug_string(value)} found at incorrect level: {level + 1} "
                f"in the JSON DOM. Expected at level: {rank}"
            )
        if isinstance(value, dict):
            if dtype != T.DT_STRING:
                raise _type_error(value, dtype)
            out.append(_decode_b64(value))
        else:
            out.append(_scalar(value, dtype))
        return
    if level >= rank:
        raise invalid_argument(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise invalid_argument(
            f"Encountered list at unexpected size: {len(value)} at level: {level} "
            f"expected size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, dtype, shape, out)


def _to_array(values: list[Any], dtype: int, shape: Sequence[int]) -> np.ndarray:
    np_type = T.numpy_dtype(dtype)
    flat: Any
    if dtype == T.DT_STRING:
        flat = np.empty(len(values), dtype=object)
        flat[:] = values
    elif dtype in (T.DT_INT16, T.DT_INT8, T.DT_UINT8):
        flat = np.asarray(values, dtype=np.int64).astype(np_type)  # static_cast semantics
    else:
        flat = np.asarray(values, dtype=np_type)
    return flat.reshape(list(shape))


def _tensor(value: Any, dtype: int) -> tuple[list[Any], list[int]]:
    shape = _dense_shape(value)
    values: list[Any] = []
    _fill(value, 0, dtype, shape, values)
    return values, shape


def _is_element_object(value: Any) -> bool:
    return isinstance(value, dict) and not _is_b64(value)


def _instances(items: list[Any], infos: Mapping[str, int]) -> dict[str, np.ndarray]:
    """FillTensorMapFromInstancesList: one row per element, batched along a new dim 0."""
    if not isinstance(items[0], dict) and len(infos) > 1:
        raise invalid_argument(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    as_objects = _is_element_object(items[0])
    names = sorted(infos)
    values: dict[str, list[Any]] = {}
    shapes: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}

    def add(item: Any, name: str) -> None:
        if name not in infos:
            raise invalid_argument(f"JSON object: does not have named input: {name}")
        row, shape = _tensor(item, infos[name])
        if name not in sizes:
            sizes[name], shapes[name] = len(row), shape
        elif sizes[name] != len(row):
            raise invalid_argument(f"Expecting tensor size: {sizes[name]} but got: {len(row)}")
        elif shapes[name] != shape:
            raise invalid_argument(
                f"Expecting shape {_shape_text(shapes[name])} but got: {_shape_text(shape)}"
            )
        values.setdefault(name, []).extend(row)

    for index, element in enumerate(items):
        if as_objects:
            if not _is_element_object(element):
                raise invalid_argument(
                    f"Expecting object but got list at item {index} of input list"
                )
            for name, item in element.items():
                try:
                    add(item, name)
                except ServingError as exc:
                    raise invalid_argument(
                        f"Failed to process element: {index} key: {name} of 'instances' list. "
                        f"Error: {exc}"
                    ) from exc
            if sorted(element) != names:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{debug_string(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if _is_element_object(element):
                raise invalid_argument(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add(element, names[0])
            except ServingError as exc:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. Error: {exc}"
                ) from exc
    return {
        name: _to_array(values[name], infos[name], [len(items), *shapes[name]]) for name in values
    }


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(size) for size in shape) + "]"


def _columnar(value: Any, infos: Mapping[str, int]) -> dict[str, np.ndarray]:
    """FillTensorMapFromInputsMap: one tensor per named input, taken as given."""
    if not isinstance(value, dict) or _is_b64(value):
        if len(infos) > 1:
            raise invalid_argument(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        name = next(iter(infos))
        row, shape = _tensor(value, infos[name])
        return {name: _to_array(row, infos[name], shape)}
    result = {}
    for name in sorted(infos):
        if name not in value:
            raise invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        row, shape = _tensor(value[name], infos[name])
        result[name] = _to_array(row, infos[name], shape)
    return result


def parse_predict(
    document: dict[str, Any], *, input_dtypes: Callable[[str], Mapping[str, int]]
) -> PredictJson:
    """FillPredictRequestFromJson; input_dtypes(signature_name) resolves the model's inputs."""
    signature_name = _signature_name(document)
    infos = input_dtypes(signature_name)
    if not infos:
        raise invalid_argument(
            f"Failed to get input map for signature: {signature_name or 'DEFAULT'}"
        )
    has_instances, has_inputs = "instances" in document, "inputs" in document
    if has_instances and has_inputs:
        raise _format_error(
            document,
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ",
        )
    if has_instances:
        items = document["instances"]
        if not isinstance(items, list):
            raise _format_error(document, "Expecting 'instances' to be an list/array")
        if not items:
            raise _format_error(document, "No values in 'instances' array")
        return PredictJson(signature_name, True, _instances(items, infos))
    if has_inputs:
        return PredictJson(signature_name, False, _columnar(document["inputs"], infos))
    raise invalid_argument("Missing 'inputs' or 'instances' key")


def _signature_name(document: dict[str, Any]) -> str:
    name = document.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid_argument(
            f"JSON Value: {debug_string(document)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    return name


def _incompatible(name: str, feature: feature_pb2.Feature) -> ServingError:
    kind = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}.get(
        feature.WhichOneof("kind") or "", "UNKNOWN"
    )
    return invalid_argument(f"Unexpected element type in feature: {name} expecting type: {kind}")


def _add_feature_value(value: Any, name: str, feature: feature_pb2.Feature) -> None:
    """AddValueToFeature: the JSON type picks the feature list kind."""
    kind = feature.WhichOneof("kind")
    if value is None or isinstance(value, list) or (isinstance(value, dict) and not _is_b64(value)):
        raise invalid_argument(
            f"Feature: {name} has element with unexpected JSON type: {json_type_name(value)}"
        )
    item: Any
    if isinstance(value, bool):
        wanted, item = "int64_list", int(value)
    elif isinstance(value, dict):
        wanted, item = "bytes_list", _decode_b64(value)
    elif isinstance(value, str):
        wanted, item = "bytes_list", value.encode("utf-8", "surrogatepass")
    elif isinstance(value, float) or not _is_int(value, _UINT64):
        wanted, item = "float_list", float(value)
    else:
        wanted, item = "int64_list", value
    if kind not in (None, wanted):
        raise _incompatible(name, feature)
    if wanted == "int64_list" and not isinstance(value, bool) and not _is_int(item, _INT64):
        raise invalid_argument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
    getattr(feature, wanted).value.append(item)


def _example(value: Any) -> example_pb2.Example:
    if not isinstance(value, dict):
        raise invalid_argument(f"Example must be JSON object but got JSON {json_type_name(value)}")
    example = example_pb2.Example()
    for name, content in value.items():
        feature = feature_pb2.Feature()
        for item in content if isinstance(content, list) else [content]:
            _add_feature_value(item, name, feature)
        example.features.feature[name].CopyFrom(feature)
    return example


def parse_examples(document: dict[str, Any]) -> tuple[str, input_pb2.Input]:
    """FillClassifyRegressRequestFromJson: (signature_name, Input) for classify and regress."""
    signature_name = _signature_name(document)
    request_input = input_pb2.Input()
    has_context = "context" in document
    if has_context:
        context = request_input.example_list_with_context.context
        context.CopyFrom(_example(document["context"]))
    if "examples" not in document:
        # TF Serving says "classify" here for regress requests too.
        raise _format_error(
            document, "When method is classify, key 'examples' is expected and was not found"
        )
    examples = document["examples"]
    if not isinstance(examples, list):
        raise _format_error(document, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise _format_error(document, "'examples' value is an empty array")
    target = (
        request_input.example_list_with_context.examples
        if has_context
        else request_input.example_list.examples
    )
    for item in examples:
        target.add().CopyFrom(_example(item))
    return signature_name, request_input
