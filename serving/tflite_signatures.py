"""The signature of a TF Lite model that carries none of TF Lite's own, as TF Serving's
TfLiteSession builds it: `serving_default`, over the interpreter's input and output tensors.

Two kinds of models, both in TF Serving's own test data:
- SignatureDefs written by TF Lite's signature_def_util into the `signature_defs_metadata`
  buffer (a FlexBuffer map from key to a serialized SignatureDef): each tensor takes the alias
  that SignatureDef gives it (its TF name less the ":0"), and the method is the SignatureDef's;
- nothing at all: each tensor is known by its own name, and the method is Predict.

Run as TF Serving runs them: an input of the tensor's byte size is copied in as it is (so
`[2.0]` fills a `[1, 1]` tensor); any other size resizes the tensor first.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from flatbuffers import flexbuffers
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.lite.python import schema_py_generated as schema

SIGNATURE_DEFS_METADATA = "signature_defs_metadata"  # TF Lite's kSignatureDefsMetadataName
DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"


def _metadata_signature_defs(*, content: bytes) -> dict[str, meta_graph_pb2.SignatureDef]:
    model = schema.Model.GetRootAsModel(content, 0)
    for index in range(model.MetadataLength()):
        metadata = model.Metadata(index)
        if metadata.Name() != SIGNATURE_DEFS_METADATA.encode():
            continue
        buffer = model.Buffers(metadata.Buffer()).DataAsNumpy()
        found: dict[str, meta_graph_pb2.SignatureDef] = {}
        entries = flexbuffers.GetRoot(bytes(buffer)).AsMap
        for key in entries.Keys:
            signature = meta_graph_pb2.SignatureDef()
            signature.ParseFromString(entries[key.AsKey].AsStringBytes)
            found[key.AsKey] = signature
        return found
    return {}


def metadata_aliases(*, content: bytes) -> tuple[dict[str, str], str]:
    """Tensor name → alias, and the method, from the model's `signature_defs_metadata` ({} and
    Predict without one). ValueError when it cannot be read or holds more than one."""
    try:
        signatures = _metadata_signature_defs(content=content)
    except (DecodeError, IndexError, ValueError, TypeError, AttributeError, struct.error) as exc:
        # A hostile file may hold anything there: every way the readers fail is "invalid".
        raise ValueError(f"Invalid SignatureDefs found in TfLite model: {exc}") from exc
    if not signatures:
        return {}, PREDICT_METHOD
    if len(signatures) > 1:
        # As TF Serving: one signature, under its own key or not, is all a session serves.
        raise ValueError(f"Multiple SignatureDefs found in TfLite model: {sorted(signatures)}")
    signature = next(iter(signatures.values()))
    aliases = {info.name.split(":", 1)[0]: alias
               for infos in (signature.inputs, signature.outputs)
               for alias, info in infos.items()}
    return aliases, signature.method_name


class TensorRunner:
    """A signature runner over the interpreter's own tensors: what TfLiteServable asks of one
    (its details by alias, a call by alias), for a model without TF Lite signatures."""

    def __init__(self, *, interpreter: Any, aliases: Mapping[str, str]) -> None:
        self._interpreter = interpreter
        interpreter.allocate_tensors()
        self._inputs = self._by_alias(interpreter.get_input_details(), aliases)
        self._outputs = self._by_alias(interpreter.get_output_details(), aliases)

    @staticmethod
    def _by_alias(details: list[dict[str, Any]], aliases: Mapping[str, str]
                  ) -> dict[str, dict[str, Any]]:
        named: dict[str, dict[str, Any]] = {}
        for detail in details:
            if aliases and detail["name"] not in aliases:
                raise ValueError(f"its SignatureDef does not name tensor {detail['name']}")
            alias = aliases.get(detail["name"], detail["name"])
            if alias in named:
                raise ValueError(f"tensor name {alias} has multiple indices")
            named[alias] = detail
        return named

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return self._inputs

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return self._outputs

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        interpreter = self._interpreter
        for alias, value in inputs.items():
            index = self._inputs[alias]["index"]
            current = next(detail["shape"] for detail in interpreter.get_input_details()
                           if detail["index"] == index)
            if value.dtype != object and value.nbytes == value.itemsize * int(np.prod(current)):
                value = value.reshape(current)
            else:
                interpreter.resize_tensor_input(index, list(value.shape))
                interpreter.allocate_tensors()
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        return {alias: interpreter.get_tensor(detail["index"])
                for alias, detail in self._outputs.items()}
