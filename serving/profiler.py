"""tensorflow.ProfilerService on the gRPC port, as TF Serving registers it (--enable_profiler),
so `tf.profiler.experimental.client.trace('grpc://host:port', logdir, ms)` and TensorBoard's
"capture profile" collect a trace of the model server.

TensorFlow's wheel ships no Python stubs for profiler_service.proto (only its C++ headers), so
the few messages the service speaks are described here at import, in a descriptor pool of their
own (field numbers as in tsl/profiler/protobuf/profiler_service.proto), over the ProfileOptions
and XSpace the wheel does ship; no code generation at build time.

Profile does what TF's profiler_service_impl does: a ProfilerSession in this process for the
requested duration, then the XSpace either in the response (emit_xspace) or written to
`<repository_root>/<session_id>/<host>.xplane.pb`, where the client's logdir expects it.
Monitor answers UNIMPLEMENTED, as TF's does.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorflow.tsl.profiler.protobuf import profiler_options_pb2, xplane_pb2

log = logging.getLogger(__name__)

SERVICE = "tensorflow.ProfilerService"
_F = descriptor_pb2.FieldDescriptorProto


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in (profiler_options_pb2, xplane_pb2):
        shipped = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(shipped)
        # TF's XSpace carries raw bytes in string fields (C++ never checks them): read as
        # proto2, which does not insist on UTF-8.
        shipped.syntax = "proto2"
        pool.Add(shipped)
    file = descriptor_pb2.FileDescriptorProto(
        name="serving/profiler_service.proto", package="tensorflow", syntax="proto3",
        dependency=[profiler_options_pb2.DESCRIPTOR.name, xplane_pb2.DESCRIPTOR.name],
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        added = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added.field.add(name=field_name, number=number, type=kind, label=label,
                            type_name=type_name or None)

    one, many = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    message(
        "ProfileRequest",
        ("duration_ms", 1, _F.TYPE_UINT64, one, ""),
        ("max_events", 2, _F.TYPE_UINT64, one, ""),
        ("tools", 3, _F.TYPE_STRING, many, ""),
        ("opts", 4, _F.TYPE_MESSAGE, one, ".tensorflow.ProfileOptions"),
        ("repository_root", 5, _F.TYPE_STRING, one, ""),
        ("session_id", 6, _F.TYPE_STRING, one, ""),
        ("host_name", 7, _F.TYPE_STRING, one, ""),
        ("emit_xspace", 9, _F.TYPE_BOOL, one, ""),
    )
    message("ProfileToolData", ("name", 1, _F.TYPE_STRING, one, ""),
            ("data", 2, _F.TYPE_BYTES, one, ""))
    message(
        "ProfileResponse",
        ("tool_data", 6, _F.TYPE_MESSAGE, many, ".tensorflow.ProfileToolData"),
        ("empty_trace", 7, _F.TYPE_BOOL, one, ""),
        ("xspace", 8, _F.TYPE_MESSAGE, one, ".tensorflow.profiler.XSpace"),
    )
    message("TerminateRequest", ("session_id", 1, _F.TYPE_STRING, one, ""))
    message("TerminateResponse")
    pool.Add(file)
    return pool


_POOL = _pool()


def _message_class(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"tensorflow.{name}"))


ProfileRequest = _message_class("ProfileRequest")
ProfileResponse = _message_class("ProfileResponse")
TerminateRequest = _message_class("TerminateRequest")
TerminateResponse = _message_class("TerminateResponse")
XSpace = _message_class("profiler.XSpace")


def xplane_path(*, repository_root: str, session_id: str, host: str) -> Path:
    """SaveXSpace's file: one per host under the run (session) directory."""
    host = (host or socket.gethostname()).replace(":", "_")
    return Path(repository_root) / session_id / f"{host}.xplane.pb"


def _write_beneath(*, root: Path, path: Path) -> bool:
    """Whether `path` lies inside `root` once `..` and symbolic links are resolved."""
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


class ProfilerService:
    """One profile at a time: TensorFlow's profiler is process-wide.

    `write_root`: when set, the only directory a Profile may write under (a request naming
    another repository_root is refused with PERMISSION_DENIED before anything runs)."""

    def __init__(self, *, write_root: str = "") -> None:
        self._write_root = write_root
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._stopped: set[str] = set()

    def profile(self, request: Any, context: grpc.ServicerContext) -> Any:
        duration_ms = request.opts.duration_ms or request.duration_ms
        path = None
        if not request.emit_xspace:
            path = xplane_path(repository_root=request.repository_root,
                               session_id=request.session_id,
                               host=request.opts.override_hostname or request.host_name)
            if not request.repository_root or not request.session_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "A profile request needs repository_root and session_id.")
            if self._write_root and not _write_beneath(root=Path(self._write_root), path=path):
                context.abort(grpc.StatusCode.PERMISSION_DENIED,
                              f"This model server writes profiles only under {self._write_root}.")
        if not self._lock.acquire(blocking=False):
            context.abort(grpc.StatusCode.INTERNAL, "Another profiling session is active.")
        try:
            serialized = self._trace(request.session_id, duration_ms, context)
        except OSError as exc:  # a confined server without a write root, a full disk
            context.abort(grpc.StatusCode.INTERNAL, f"The profiler cannot write its trace: {exc}")
        finally:
            self._lock.release()
        if serialized is None:
            context.abort(grpc.StatusCode.CANCELLED, "Cancelled")
            return None
        response = ProfileResponse()
        space = XSpace.FromString(serialized)
        response.empty_trace = not any(line.events for plane in space.planes
                                       for line in plane.lines)
        if path is None:
            response.xspace.CopyFrom(space)
            return response
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(serialized)
        except OSError as exc:
            context.abort(grpc.StatusCode.INTERNAL, f"Writing {path} failed: {exc}")
        log.info("Profile of %d ms written to %s", duration_ms, path)
        return response

    def _trace(self, session_id: str, duration_ms: int,
               context: grpc.ServicerContext) -> bytes | None:
        """A serialized XSpace of this process over the duration; None if the client left.

        This wheel's ProfilerSession hands back an XSpace only as a file (export_to_tb, in
        TensorBoard's layout under the logdir it was started with), so it goes through a
        scratch directory: beneath the write root when there is one (the only place a confined
        server may write), else the system's temporary directory."""
        from tensorflow.python.profiler.internal import _pywrap_profiler

        with tempfile.TemporaryDirectory(dir=self._write_root or None,
                                         prefix=".profile-") as scratch:
            session = _pywrap_profiler.ProfilerSession()
            try:
                # TF's default levels (host tracer 2, device 1, Python 0): this wheel's session
                # does not take the request's levels from a dict (it warns "expects an i value").
                session.start(scratch, {})
            except Exception as exc:
                context.abort(grpc.StatusCode.INTERNAL, str(exc))
            cancelled = self._wait(session_id, duration_ms, context)
            session.export_to_tb()
            if cancelled:
                return None
            written = sorted(Path(scratch).glob("plugins/profile/*/*.xplane.pb"))
            if not written:
                context.abort(grpc.StatusCode.INTERNAL, "The profiler wrote no trace.")
            return written[0].read_bytes()

    def _wait(self, session_id: str, duration_ms: int, context: grpc.ServicerContext) -> bool:
        """Sleeps out the duration; True if the client went away first. Terminate ends it."""
        deadline = time.monotonic() + duration_ms / 1000
        while time.monotonic() < deadline:
            if not context.is_active():
                return True
            with self._stop_lock:
                if session_id in self._stopped:
                    self._stopped.discard(session_id)
                    break
            time.sleep(0.01)
        return False

    def terminate(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._stop_lock:
            self._stopped.add(request.session_id)
        return TerminateResponse()

    def monitor(self, request: bytes, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "unimplemented.")


def profiler_handler(service: ProfilerService) -> grpc.GenericRpcHandler:
    def raw(data: bytes) -> bytes:
        return data

    handlers = {
        "Profile": grpc.unary_unary_rpc_method_handler(
            service.profile, request_deserializer=ProfileRequest.FromString,
            response_serializer=ProfileResponse.SerializeToString),
        "Terminate": grpc.unary_unary_rpc_method_handler(
            service.terminate, request_deserializer=TerminateRequest.FromString,
            response_serializer=TerminateResponse.SerializeToString),
        "Monitor": grpc.unary_unary_rpc_method_handler(
            service.monitor, request_deserializer=raw, response_serializer=raw),
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def profile_trace(*, channel: grpc.Channel, logdir: str, duration_ms: int, host: str) -> Path:
    """What tf.profiler.experimental.client.trace asks, from a client that can send the
    server's access token (wrap `channel` with access.channel_with_token): TF's own client sends
    no call metadata, so it reaches only a server without a token. Returns the trace file."""
    session_id = time.strftime("%Y_%m_%d_%H_%M_%S")
    request = ProfileRequest(duration_ms=duration_ms, repository_root=f"{logdir}/plugins/profile",
                             session_id=session_id, host_name=host)
    request.opts.duration_ms = duration_ms
    call = channel.unary_unary(f"/{SERVICE}/Profile",
                               request_serializer=ProfileRequest.SerializeToString,
                               response_deserializer=ProfileResponse.FromString)
    call(request, timeout=duration_ms / 1000 + 60)
    return xplane_path(repository_root=request.repository_root, session_id=session_id, host=host)
