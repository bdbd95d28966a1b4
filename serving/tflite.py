"""TF Lite versions (--prefer_tflite_model): a version directory holding `model.tflite` is
served by tf.lite.Interpreter instead of its SavedModel, as TF Serving's TfLiteSession does.

The model's own SignatureDefs become the servable's (a model with none gets TF Serving's
`serving_default` over its tensors: tflite_signatures.py): each input and output keeps its alias,
its TF Lite tensor name stands as the graph tensor name, and Predict, its `signature_name`,
output_filter and GetModelMetadata work over them as over a SavedModel's (method name
`tensorflow/serving/predict`; TF Lite has no classify or regress).

A .tflite file is hostile input like a SavedModel: it is parsed and run only inside the model
server, which confines itself (confine.py) before it loads any model. One interpreter per
version, one run at a time (an interpreter is not thread-safe), as TF Serving's pool of one.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_shape_pb2
from tensorflow.core.protobuf import meta_graph_pb2

from serving import tensors as T
from serving.errors import Code, ServingError, invalid_argument
from serving.servable import Servable
from serving.tflite_convert import TFLITE_FILE
from serving.tflite_signatures import (
    DEFAULT_SIGNATURE,
    PREDICT_METHOD,
    TensorRunner,
    metadata_aliases,
)


def tflite_model_path(version_dir: Path) -> Path | None:
    found = version_dir / TFLITE_FILE
    return found if found.is_file() else None


def _tensor_info(detail: Mapping[str, Any]) -> meta_graph_pb2.TensorInfo:
    dims = detail.get("shape_signature")
    if dims is None or not len(dims):
        dims = detail["shape"]
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(size)) for size in dims])
    return meta_graph_pb2.TensorInfo(
        name=detail["name"], dtype=T.dtype_of(np.empty(0, dtype=detail["dtype"])),
        tensor_shape=shape)


class TfLiteServable(Servable):
    """A Servable whose runs go to a TF Lite interpreter; acquire/release/close as any."""

    def __init__(self, *, name: str, version: int, path: Path, num_threads: int = 0) -> None:
        # Not Servable.__init__: there is no session or graph to load.
        self.name = name
        self.version = version
        self.path = path
        model = path / TFLITE_FILE
        try:
            content = model.read_bytes()
            with warnings.catch_warnings():
                # "tf.lite.Interpreter is deprecated": still TF 2.21's, and the one it ships.
                warnings.simplefilter("ignore", UserWarning)
                self._interpreter = tf.lite.Interpreter(
                    model_content=content, num_threads=num_threads or None)
            # This wheel's interpreter has no Flex delegate: TensorFlow ops inside a .tflite
            # (FlexReadFile...) would fail at their first run; refused before serving instead.
            # (_get_ops_details is the op list TF Lite's own Python tools read.)
            flex = sorted({op["op_name"] for op in self._interpreter._get_ops_details()
                           if str(op["op_name"]).startswith("Flex")})
            if flex:
                raise ValueError(f"it uses TensorFlow ops, which TF Lite here cannot run: "
                                 f"{', '.join(flex)}")
            runners: dict[str, Any] = {
                key: self._interpreter.get_signature_runner(key)
                for key in self._interpreter.get_signature_list()}
            if not runners:
                # TF Serving's default signature (tflite_signatures.py).
                aliases, method = metadata_aliases(content=content)
                if method != PREDICT_METHOD:
                    raise ValueError(f"its SignatureDef's method is {method!r}; TF Lite models "
                                     f"are served for Predict only")
                runners = {DEFAULT_SIGNATURE: TensorRunner(interpreter=self._interpreter,
                                                           aliases=aliases)}
        except OSError as exc:
            raise ServingError(Code.NOT_FOUND, str(exc)) from exc
        except (ValueError, RuntimeError) as exc:
            raise ServingError(Code.INVALID_ARGUMENT,
                               f"Cannot load TF Lite model {model}: {exc}") from exc
        self._runners = runners
        self.meta_graph_def = meta_graph_pb2.MetaGraphDef()
        self._routes: dict[str, tuple[str, str]] = {}  # tensor name -> (signature, alias)
        for key, runner in runners.items():
            signature = self.meta_graph_def.signature_def[key]
            signature.method_name = PREDICT_METHOD
            for alias, detail in runner.get_input_details().items():
                signature.inputs[alias].CopyFrom(_tensor_info(detail))
                self._routes[detail["name"]] = (key, alias)
            for alias, detail in runner.get_output_details().items():
                signature.outputs[alias].CopyFrom(_tensor_info(detail))
        self._callables = {}
        self._cond = threading.Condition()
        self._users = 0
        self._closing = False
        self.runs = 0
        self._run_lock = threading.Lock()

    def _signature_for(self, feeds: Mapping[str, np.ndarray]) -> str:
        keys = {self._routes[name][0] for name in feeds if name in self._routes}
        if len(keys) != 1 or any(name not in self._routes for name in feeds):
            raise invalid_argument(f"Inputs {sorted(feeds)} do not belong to one signature.")
        return keys.pop()

    def run(
        self,
        *,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int = 0,
    ) -> list[np.ndarray]:
        key = self._signature_for(feeds)
        signature = self.meta_graph_def.signature_def[key]
        by_name = {info.name: alias for alias, info in signature.outputs.items()}
        inputs: dict[str, np.ndarray] = {}
        for name, value in feeds.items():
            alias = self._routes[name][1]
            wanted = tf.dtypes.as_dtype(signature.inputs[alias].dtype).as_numpy_dtype
            array = np.asarray(value)
            if array.dtype != wanted:
                raise invalid_argument(
                    f"Expected input {alias} of type {np.dtype(wanted).name}, got "
                    f"{array.dtype.name}")
            inputs[alias] = array
        try:
            with self._run_lock:
                self.runs += 1
                outputs = self._runners[key](**inputs)
                # Copies: the interpreter reuses its buffers on the next run.
                return [np.array(outputs[by_name[name]]) for name in fetches]
        except KeyError as exc:
            raise invalid_argument(f"Unknown output tensor {exc}") from exc
        except (ValueError, RuntimeError) as exc:
            raise invalid_argument(str(exc)) from exc

    def close(self) -> None:
        with self._cond:
            self._closing = True
            while self._users:
                self._cond.wait()
        with self._run_lock:
            self._runners.clear()
