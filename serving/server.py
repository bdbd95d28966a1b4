"""The embedded model server: TF Serving's gRPC and REST APIs over one model manager.

Run standalone with tensorflow_model_server's flags (serving/__main__.py):
    python -m serving --port=8500 --rest_api_port=8501 \
        --model_name=NAME --model_base_path=/models/NAME
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import grpc
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.batching import BatchingRunner, DirectRunner, Runner
from serving.config import BatchingOptions, read_model_server_config
from serving.front import Front
from serving.grpc_api import create_grpc_server
from serving.http_server import RestServer
from serving.inference import Inference
from serving.manager import ModelManager
from serving.metrics import MetricsInterceptor, MonitoringOptions, ServingMetrics
from serving.profiler import ProfilerService
from serving.rest_api import RestApi
from serving.servable import DEFAULT_TAGS, Servable, session_config
from serving.tflite import TfLiteServable, tflite_model_path
from serving.warmup import version_load

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """tensorflow_model_server's options. Ports: None disables, 0 picks a free port."""

    grpc_port: int | None = 8500
    rest_api_port: int | None = 8501
    host: str = "0.0.0.0"  # noqa: S104 - TF Serving listens on all interfaces
    grpc_socket_path: str = ""
    grpc_max_threads: int = 4 * (os.cpu_count() or 1)
    rest_api_timeout_in_ms: int = 30000
    rest_api_enable_cors_support: bool = False
    batching: BatchingOptions | None = None  # None: --enable_batching off
    file_system_poll_wait_seconds: float = 1
    model_config_file_poll_wait_seconds: float = 0
    allow_version_labels_for_unavailable_models: bool = False
    enable_signature_method_name_check: bool = False
    saved_model_tags: tuple[str, ...] = DEFAULT_TAGS
    intra_op_parallelism: int = 0
    inter_op_parallelism: int = 0
    # --grpc_channel_arguments, e.g. (("grpc.max_receive_message_length", 67108864),)
    grpc_channel_arguments: tuple[tuple[str, str | int], ...] = ()
    enable_model_warmup: bool = True
    num_request_iterations_for_warmup: int = 1
    # --monitoring_config_file
    monitoring: MonitoringOptions = field(default_factory=MonitoringOptions)
    prefer_tflite_model: bool = False  # serve a version's model.tflite if it has one (tflite.py)
    enable_profiler: bool = True  # tensorflow.ProfilerService on the gRPC port (profiler.py)
    # Not TF Serving's: when set, the only directory a Profile request may write its trace under.
    profiler_write_root: str = ""
    # Required of every call when set (access.py); TF Serving has none.
    access_token: str = field(default="", repr=False)
    # Not TF Serving's: when positive, platform tokens are taken too (front.py), against the
    # access table the platform pushes, trusted for this many seconds after each push.
    front_max_age_seconds: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)  # accepted, not acted upon


class ModelServer:
    """Start with a ModelServerConfig (or a model_config_file); stop() or use as a context."""

    def __init__(
        self,
        *,
        options: ServerOptions,
        config: model_server_config_pb2.ModelServerConfig | None = None,
        model_config_file: Path | None = None,
    ) -> None:
        self.options = options
        self._config_file = model_config_file
        self._initial = (
            config if config is not None else model_server_config_pb2.ModelServerConfig()
        )
        sessions = session_config(
            intra_op_parallelism=options.intra_op_parallelism,
            inter_op_parallelism=options.inter_op_parallelism,
        )

        self.metrics = ServingMetrics()
        warmup = options.num_request_iterations_for_warmup if options.enable_model_warmup else None

        def load(name: str, version: int, path: Path) -> Servable:
            def servable() -> Servable:
                if options.prefer_tflite_model and tflite_model_path(path) is not None:
                    log.info("Serving %s version %d from its TF Lite model", name, version)
                    return TfLiteServable(name=name, version=version, path=path,
                                          num_threads=max(options.intra_op_parallelism, 0))
                return Servable(name=name, version=version, path=path,
                                tags=options.saved_model_tags, session_config=sessions)

            return version_load(
                load=servable,
                path=path, inference=self.inference, metrics=self.metrics,
                warmup_iterations=warmup,
            )

        self.manager = ModelManager(
            factory=load,
            allow_version_labels_for_unavailable_models=(
                options.allow_version_labels_for_unavailable_models
            ),
        )
        runner: Runner = (
            BatchingRunner(options=options.batching) if options.batching else DirectRunner()
        )
        self.inference = Inference(
            manager=self.manager,
            runner=runner,
            check_method_names=options.enable_signature_method_name_check,
        )
        self.inference.metrics = self.metrics
        if isinstance(runner, BatchingRunner):
            runner.metrics = self.metrics
        self.front = (Front(max_age_seconds=options.front_max_age_seconds)
                      if options.front_max_age_seconds > 0 else None)
        self._grpc: grpc.Server | None = None
        self._rest: RestServer | None = None
        self._grpc_port = 0
        self._stop = threading.Event()
        self._config_poller: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Loads the initial models (raising ServingError if one fails), then opens the ports."""
        config = self._initial
        if self._config_file is not None:
            config = read_model_server_config(self._config_file)
        self.manager.reload_config(config)
        self.manager.start_polling(interval_seconds=self.options.file_system_poll_wait_seconds)
        self._start_grpc()
        if self.options.rest_api_port is not None:
            api = RestApi(inference=self.inference, timeout_ms=self.options.rest_api_timeout_in_ms,
                          metrics=self.metrics)
            monitoring = self.options.monitoring
            self._rest = RestServer(
                api=api,
                host=self.options.host,
                port=self.options.rest_api_port,
                cors=self.options.rest_api_enable_cors_support,
                access_token=self.options.access_token,
                front=self.front,
                metrics=(monitoring.path, self.metrics.exposition)
                if monitoring.prometheus else None,
            )
            self._rest.start()
            log.info("Exporting HTTP/REST API at:%s:%d ...", self.options.host, self.rest_port)
        if self._config_file is not None and self.options.model_config_file_poll_wait_seconds > 0:
            self._config_poller = threading.Thread(
                target=self._poll_config_file, name="config-poll", daemon=True
            )
            self._config_poller.start()

    def _start_grpc(self) -> None:
        if self.options.grpc_port is None and not self.options.grpc_socket_path:
            return
        server = self._grpc = create_grpc_server(
            inference=self.inference,
            manager=self.manager,
            max_threads=self.options.grpc_max_threads,
            access_token=self.options.access_token,
            front=self.front,
            channel_arguments=self.options.grpc_channel_arguments,
            interceptors=(MetricsInterceptor(metrics=self.metrics),),
            profiler=(ProfilerService(write_root=self.options.profiler_write_root)
                      if self.options.enable_profiler else None),
        )
        if self.options.grpc_port is not None:
            address = f"{self.options.host}:{self.options.grpc_port}"
            self._grpc_port = server.add_insecure_port(address)
            if not self._grpc_port:
                raise OSError(f"cannot bind gRPC to {address}")
            log.info("Running gRPC ModelServer at %s:%d ...", self.options.host, self._grpc_port)
        if self.options.grpc_socket_path:
            server.add_insecure_port(f"unix:{self.options.grpc_socket_path}")
        server.start()

    def _poll_config_file(self) -> None:
        assert self._config_file is not None
        while not self._stop.wait(self.options.model_config_file_poll_wait_seconds):
            try:
                new = read_model_server_config(self._config_file)
                if text_format.MessageToString(new) != text_format.MessageToString(
                    self.manager.config()
                ):
                    self.manager.reload_config(new)
            except Exception:  # a half-written or bad file must not kill the poller
                log.exception("reloading %s failed", self._config_file)

    def stop(self) -> None:
        self._stop.set()
        if self._rest is not None:
            self._rest.stop()
        if self._grpc is not None:
            self._grpc.stop(grace=1).wait()
        self.inference.runner.close()
        self.manager.close()

    def wait(self) -> None:
        self._stop.wait()

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- addresses and introspection ----------------------------------------------------

    @property
    def grpc_port(self) -> int:
        return self._grpc_port

    @property
    def rest_port(self) -> int:
        return self._rest.port if self._rest is not None else 0

    def _client_host(self) -> str:
        return "127.0.0.1" if self.options.host in ("0.0.0.0", "") else self.options.host  # noqa: S104

    @property
    def grpc_target(self) -> str:
        return f"{self._client_host()}:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://{self._client_host()}:{self.rest_port}"

    def model_runs(self, *, name: str, version: int) -> int:
        """Session runs so far for one loaded version (a batched run counts once)."""
        return self.manager.servable_runs(name=name, version=version)
