"""Client for TF Serving's APIs, for both the embedded server and a tensorflow/serving container.

Importing this module, reload_config, model_status, wait_available and the REST calls
(rest_forward, predict_rest) do not load TensorFlow: the web process can deploy models and
forward REST inference cheaply. The gRPC inference calls (predict, classify, regress,
metadata) need TF's protos and import TensorFlow on first use.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

import grpc
import numpy as np
import requests
from tensorflow_serving.config import model_server_config_pb2

from serving.access import access_header, channel_with_token
from serving.front import ACCESS_PATH, AccessTable, access_table_to_wire

_RELOAD_METHOD = "/tensorflow.serving.ModelService/HandleReloadConfigRequest"
_UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
_POLL_SECONDS = 0.2


class ModelServerError(Exception):
    """A non-OK answer. code is the status name (NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE...)."""

    def __init__(self, *, code: str, message: str, http_status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.http_status = http_status


@dataclass(frozen=True)
class ModelEntry:
    """One model to serve. versions=() serves the latest version only (TF Serving's default)."""

    name: str
    base_path: str
    versions: tuple[int, ...] = ()
    labels: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class VersionStatus:
    version: int
    state: str  # START, LOADING, AVAILABLE, UNLOADING or END
    error_code: str = "OK"
    error_message: str = ""


@dataclass(frozen=True)
class ModelStatus:
    name: str
    versions: tuple[VersionStatus, ...]

    @property
    def available(self) -> tuple[int, ...]:
        return tuple(v.version for v in self.versions if v.state == "AVAILABLE")

    def version(self, version: int) -> VersionStatus | None:
        return next((v for v in self.versions if v.version == version), None)


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # e.g. DT_FLOAT
    shape: tuple[int, ...] | None  # None for unknown rank; -1 for unknown dimensions
    tensor_name: str


@dataclass(frozen=True)
class SignatureInfo:
    method_name: str
    inputs: Mapping[str, TensorInfo]
    outputs: Mapping[str, TensorInfo]


@dataclass(frozen=True)
class ModelMetadata:
    name: str
    version: int
    signatures: Mapping[str, SignatureInfo]


def model_server_config(models: Sequence[ModelEntry]) -> model_server_config_pb2.ModelServerConfig:
    """The ModelServerConfig TF Serving expects for these models."""
    config = model_server_config_pb2.ModelServerConfig()
    for entry in models:
        model = config.model_config_list.config.add(
            name=entry.name, base_path=entry.base_path, model_platform="tensorflow"
        )
        if entry.versions:
            model.model_version_policy.specific.versions.extend(entry.versions)
        else:
            model.model_version_policy.latest.num_versions = 1
        for label, version in entry.labels.items():
            model.version_labels[label] = version
    return config


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _reload_request(config: model_server_config_pb2.ModelServerConfig) -> bytes:
    # ReloadConfigRequest is {ModelServerConfig config = 1;}. Encoding it by hand avoids
    # model_management_pb2, whose imports load all of TensorFlow.
    payload = config.SerializeToString()
    return b"\x0a" + _varint(len(payload)) + payload


def _grpc_error(exc: grpc.RpcError) -> ModelServerError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return ModelServerError(code=code.name if code else "UNKNOWN", message=details or "")


class ModelServerClient:
    def __init__(self, *, grpc_target: str, rest_url: str, timeout: float = 30.0,
                 access_token: str = "") -> None:
        """`access_token`: the embedded server's (access.py), sent on every call."""
        self._rest_url = rest_url.rstrip("/")
        rest = urlsplit(self._rest_url)
        self._rest_host, self._rest_port = rest.hostname or "127.0.0.1", rest.port or 80
        self._rest_prefix = rest.path
        self._timeout = timeout
        self._raw_channel = grpc.insecure_channel(grpc_target, options=_UNLIMITED)
        self._channel = channel_with_token(channel=self._raw_channel, token=access_token)
        self._auth = access_header(token=access_token)
        self._http = requests.Session()
        self._http.headers.update(self._auth)
        self._predict_connections = threading.local()
        self._stubs: dict[str, Any] = {}

    def close(self) -> None:
        self._raw_channel.close()
        self._http.close()
        connection = getattr(self._predict_connections, "open", None)
        if connection is not None:
            connection.close()

    def __enter__(self) -> ModelServerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- model management ---------------------------------------------------------------

    def reload_config(self, *, models: Sequence[ModelEntry], timeout: float = 120.0) -> None:
        """Makes `models` the complete set served (others are unloaded).

        TF Serving refuses a label for a version that is not AVAILABLE yet, so labels whose
        version is still to be loaded are sent in a second reload once it is available.
        """
        deadline = time.monotonic() + timeout
        for entry in models:
            stray = {v for v in entry.labels.values() if entry.versions and v not in entry.versions}
            if stray:
                raise ValueError(f"labels of {entry.name} point at unserved versions {stray}")
        first: list[ModelEntry] = []
        pending: list[tuple[str, int]] = []
        for entry in models:
            ready = self.model_status(name=entry.name).available if entry.labels else ()
            kept = {label: v for label, v in entry.labels.items() if v in ready}
            pending += [(entry.name, v) for v in set(entry.labels.values()) - set(kept.values())]
            first.append(ModelEntry(entry.name, entry.base_path, entry.versions, kept))
        self._send_config(model_server_config(first), deadline)
        if not pending:
            return
        for name, version in pending:
            self.wait_available(name=name, version=version, timeout=deadline - time.monotonic())
        self._send_config(model_server_config(models), deadline)

    def _send_config(
        self, config: model_server_config_pb2.ModelServerConfig, deadline: float
    ) -> None:
        call = self._channel.unary_unary(
            _RELOAD_METHOD, request_serializer=None, response_deserializer=None
        )
        try:
            call(_reload_request(config), timeout=max(deadline - time.monotonic(), 0.001))
        except grpc.RpcError as exc:
            raise _grpc_error(exc) from exc

    def model_status(self, *, name: str, version: int | None = None) -> ModelStatus:
        """GET /v1/models/{name}: an unknown model has no versions rather than an error."""
        path = f"/v1/models/{quote(name, safe='')}"
        if version is not None:
            path += f"/versions/{version}"
        status, body = self._request("GET", path, None, self._timeout)
        if status == 404:
            return ModelStatus(name=name, versions=())
        if status != 200:
            raise _rest_error(status, body)
        versions = tuple(
            VersionStatus(
                version=int(item["version"]),
                state=item["state"],
                error_code=item.get("status", {}).get("error_code", "OK"),
                error_message=item.get("status", {}).get("error_message", ""),
            )
            for item in json.loads(body).get("model_version_status", [])
        )
        return ModelStatus(name=name, versions=versions)

    def wait_available(self, *, name: str, version: int, timeout: float) -> VersionStatus:
        """Polls until the version is AVAILABLE; raises if its load failed or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.model_status(name=name).version(version)
            if found is not None and found.state == "AVAILABLE":
                return found
            if found is not None and found.state == "END" and found.error_code != "OK":
                raise ModelServerError(code=found.error_code, message=found.error_message)
            if time.monotonic() >= deadline:
                state = found.state if found else "not known to the server"
                raise TimeoutError(f"{name} version {version} is {state} after {timeout:.0f}s")
            time.sleep(_POLL_SECONDS)

    # ---- REST passthrough ---------------------------------------------------------------

    def predict_rest(
        self, *, name: str, version: int | None = None, label: str | None = None, body: bytes
    ) -> tuple[int, bytes]:
        """POSTs TF Serving JSON to :predict and returns (HTTP status, response body) as is."""
        return self.rest_forward(call="predict", name=name, version=version, label=label,
                                 body=body)

    def rest_forward(
        self, *, call: str, name: str, version: int | None = None, label: str | None = None,
        body: bytes = b"",
    ) -> tuple[int, bytes]:
        """One of TF Serving's REST calls on a model (REST_CALLS), its answer as is: (HTTP
        status, response body).

        The platform forwards every inference request through here, so it skips `requests`
        (whose per-call session, adapter and pool bookkeeping showed in bench/inference.py's
        platform REST latency) for one kept-alive http.client connection per thread.
        """
        method, suffix = REST_CALLS[call]
        path = f"{self._rest_prefix}{_model_path(name, version, label)}{suffix}"
        headers = {"Content-Type": "application/json", **self._auth}
        for attempt in (1, 2):
            try:
                connection = self._predict_connection()
                connection.request(method, path, body=body if method == "POST" else None,
                                   headers=headers)
                answer = connection.getresponse()
                return answer.status, answer.read()
            except (OSError, http.client.HTTPException) as error:
                stale = getattr(self._predict_connections, "open", None)
                self._predict_connections.open = None
                if stale is not None:
                    stale.close()
                # A kept-alive connection the server closed meanwhile fails at once; no REST
                # call changes anything, so one retry on a fresh connection is safe.
                if attempt == 2 or isinstance(error, TimeoutError):
                    raise ModelServerError(code="UNAVAILABLE", message=str(error)) from error
        raise AssertionError("unreachable")

    def _predict_connection(self) -> http.client.HTTPConnection:
        found: http.client.HTTPConnection | None = getattr(self._predict_connections, "open", None)
        if found is None:
            found = http.client.HTTPConnection(self._rest_host, self._rest_port,
                                               timeout=self._timeout)
            found.connect()
            # Headers and body may leave in two send()s; a kept-alive socket must not hold the
            # second back waiting for an ACK.
            found.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._predict_connections.open = found
        return found

    def _request(
        self, method: str, path: str, body: bytes | None, timeout: float | None
    ) -> tuple[int, bytes]:
        try:
            response = self._http.request(
                method,
                self._rest_url + path,
                data=body,
                headers={"Content-Type": "application/json"} if body is not None else None,
                timeout=timeout or self._timeout,
            )
        except requests.RequestException as exc:
            raise ModelServerError(code="UNAVAILABLE", message=str(exc)) from exc
        return response.status_code, response.content

    def access_push(self, *, table: AccessTable, timeout: float = 5.0) -> None:
        """Hands the embedded server's front (front.py) the platform's current access table."""
        body = json.dumps(access_table_to_wire(table), separators=(",", ":")).encode()
        status, answer = self._request("PUT", ACCESS_PATH, body, timeout)
        if status != 204:
            raise _rest_error(status, answer)

    def metrics(self, *, path: str, timeout: float = 5.0) -> str:
        """The server's Prometheus text at `path` (its --monitoring_config_file's path)."""
        status, body = self._request("GET", path, None, timeout)
        if status != 200:
            raise ModelServerError(code="UNAVAILABLE", http_status=status,
                                   message=f"GET {path} answered {status}")
        return body.decode("utf-8", "replace")

    # ---- gRPC inference -----------------------------------------------------------------

    def _stub(self, kind: str) -> Any:
        if kind not in self._stubs:
            from tensorflow_serving.apis import prediction_service_pb2_grpc  # loads TensorFlow

            self._stubs[kind] = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        return self._stubs[kind]

    def _grpc(self, method: str, request: Any, timeout: float | None) -> Any:
        try:
            return getattr(self._stub("prediction"), method)(
                request, timeout=timeout or self._timeout
            )
        except grpc.RpcError as exc:
            raise _grpc_error(exc) from exc

    def predict(
        self,
        *,
        name: str,
        inputs: Mapping[str, Any],
        version: int | None = None,
        label: str | None = None,
        signature_name: str = "",
        output_filter: Sequence[str] = (),
        timeout: float | None = None,
    ) -> dict[str, np.ndarray]:
        from tensorflow_serving.apis import predict_pb2

        from serving import tensors

        request = predict_pb2.PredictRequest(output_filter=list(output_filter))
        _fill_spec(request.model_spec, name, version, label, signature_name)
        for alias, value in inputs.items():
            request.inputs[alias].CopyFrom(tensors.to_proto(value, as_content=True))
        response = self._grpc("Predict", request, timeout)
        result: dict[str, np.ndarray] = {}
        for alias, proto in response.outputs.items():
            array = tensors.to_ndarray(proto)
            if array is None:
                raise ModelServerError(code="INTERNAL", message=f"unreadable output {alias}")
            result[alias] = array
        return result

    def classify(
        self,
        *,
        name: str,
        examples: Sequence[Mapping[str, Any]],
        version: int | None = None,
        label: str | None = None,
        signature_name: str = "",
        context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[list[tuple[str, float]]]:
        from tensorflow_serving.apis import classification_pb2

        request = classification_pb2.ClassificationRequest()
        _fill_spec(request.model_spec, name, version, label, signature_name)
        _fill_input(request.input, examples, context)
        response = self._grpc("Classify", request, timeout)
        return [
            [(c.label, c.score) for c in item.classes] for item in response.result.classifications
        ]

    def regress(
        self,
        *,
        name: str,
        examples: Sequence[Mapping[str, Any]],
        version: int | None = None,
        label: str | None = None,
        signature_name: str = "",
        context: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[float]:
        from tensorflow_serving.apis import regression_pb2

        request = regression_pb2.RegressionRequest()
        _fill_spec(request.model_spec, name, version, label, signature_name)
        _fill_input(request.input, examples, context)
        response = self._grpc("Regress", request, timeout)
        return [r.value for r in response.result.regressions]

    def metadata(
        self,
        *,
        name: str,
        version: int | None = None,
        label: str | None = None,
        timeout: float | None = None,
    ) -> ModelMetadata:
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        _fill_spec(request.model_spec, name, version, label, "")
        response = self._grpc("GetModelMetadata", request, timeout)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        return ModelMetadata(
            name=response.model_spec.name,
            version=response.model_spec.version.value,
            signatures={
                key: SignatureInfo(
                    method_name=sig.method_name,
                    inputs={k: _tensor_info(v) for k, v in sig.inputs.items()},
                    outputs={k: _tensor_info(v) for k, v in sig.outputs.items()},
                )
                for key, sig in signature_map.signature_def.items()
            },
        )


# TF Serving's REST calls on a model: HTTP method and what follows the model's path.
REST_CALLS = {"predict": ("POST", ":predict"), "classify": ("POST", ":classify"),
              "regress": ("POST", ":regress"), "metadata": ("GET", "/metadata"),
              "status": ("GET", "")}


def _model_path(name: str, version: int | None, label: str | None) -> str:
    if version is not None and label is not None:
        raise ValueError("give a version or a label, not both")
    path = f"/v1/models/{quote(name, safe='')}"
    if version is not None:
        path += f"/versions/{int(version)}"
    elif label is not None:
        path += f"/labels/{quote(label, safe='')}"
    return path


def _rest_error(status: int, body: bytes) -> ModelServerError:
    try:
        message = str(json.loads(body).get("error", ""))
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    return ModelServerError(code=f"HTTP_{status}", message=message, http_status=status)


def _fill_spec(
    spec: Any, name: str, version: int | None, label: str | None, signature: str
) -> None:
    if version is not None and label is not None:
        raise ValueError("give a version or a label, not both")
    spec.name = name
    spec.signature_name = signature
    if version is not None:
        spec.version.value = version
    elif label is not None:
        spec.version_label = label


def _fill_input(
    request_input: Any, examples: Sequence[Mapping[str, Any]], context: Mapping[str, Any] | None
) -> None:
    if context is None:
        for features in examples:
            _fill_example(request_input.example_list.examples.add(), features)
        return
    listed = request_input.example_list_with_context
    _fill_example(listed.context, context)
    for features in examples:
        _fill_example(listed.examples.add(), features)


def _fill_example(example: Any, features: Mapping[str, Any]) -> None:
    """Python values to tf.train.Example features: floats, ints/bools, or str/bytes."""
    for key, raw in features.items():
        values = list(raw) if isinstance(raw, list | tuple | np.ndarray) else [raw]
        feature = example.features.feature[key]
        if values and isinstance(values[0], str | bytes):
            feature.bytes_list.value.extend(
                v.encode("utf-8") if isinstance(v, str) else v for v in values
            )
        elif values and all(isinstance(v, int | np.integer) for v in values):
            feature.int64_list.value.extend(int(v) for v in values)
        else:
            feature.float_list.value.extend(float(v) for v in values)


def _tensor_info(info: Any) -> TensorInfo:
    from tensorflow.core.framework import types_pb2

    shape = None
    if not info.tensor_shape.unknown_rank:
        shape = tuple(d.size for d in info.tensor_shape.dim)
    return TensorInfo(dtype=types_pb2.DataType.Name(info.dtype), shape=shape, tensor_name=info.name)
