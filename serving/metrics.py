"""TF Serving's metrics and its --monitoring_config_file Prometheus endpoint.

Names, labels, units (microseconds) and bucket bounds are TF Serving's (util.cc,
batching_session.cc, saved_model_warmup_util.cc, TensorFlow's saved_model/loader.cc), exported
as its Prometheus exporter names them: `/tensorflow/serving/request_count` becomes
`:tensorflow:serving:request_count`. Each server keeps its own CollectorRegistry.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric

DEFAULT_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = "text/plain"
THREAD_POOL = "batch_threads"  # BatchingParameters.thread_pool_name's default
RUNTIME = "TF1"  # a SavedModel run in a Session, as TF Serving labels it
_PREDICTION_SERVICE = "/tensorflow.serving.PredictionService"
_APIS = ("Predict", "Classify", "Regress")  # the calls prediction_service_impl.cc counts


def _exponential(scale: float, growth: float, count: int) -> tuple[float, ...]:
    """monitoring::Buckets::Exponential: count-1 finite bounds, then the overflow bucket."""
    return tuple(scale * growth**index for index in range(count - 1))


# TF Serving's request metrics name the model, not the version that answered. The platform's
# health per version needs that too: these two families repeat request_count and
# request_latency with a `model_version` label, under names that are not TF Serving's.
VERSION_REQUEST_COUNT = ":tfplatform:serving:request_count"
VERSION_REQUEST_LATENCY = ":tfplatform:serving:request_latency"

# The version the manager resolved for the request being handled (a request runs in one
# thread, or one event-loop task, from its parse to its count); None until one is resolved.
_served_version: ContextVar[int | None] = ContextVar("served_version", default=None)


def served_version_set(version: int | None) -> None:
    _served_version.set(version)


def served_version() -> int | None:
    return _served_version.get()


_LATENCY = _exponential(10, 1.8, 33)  # ~20 minutes in microseconds
_QUEUING = _exponential(100, 1.2, 52)  # ~1 second
_SIZES = _exponential(1, 2, 15)


@dataclass(frozen=True)
class MonitoringOptions:
    prometheus: bool = False
    path: str = DEFAULT_PATH


def _config_class() -> Any:
    """tensorflow.serving.MonitoringConfig (monitoring_config.proto), which the
    tensorflow-serving-api wheel does not ship: built from its two-message schema."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/monitoring_config.proto", package="tensorflow.serving",
        syntax="proto3",
    )
    prometheus = proto.message_type.add(name="PrometheusConfig")
    prometheus.field.add(name="enable", number=1, type=8, label=1)  # bool
    prometheus.field.add(name="path", number=2, type=9, label=1)  # string
    config = proto.message_type.add(name="MonitoringConfig")
    config.field.add(name="prometheus_config", number=1, type=11, label=1,
                     type_name=".tensorflow.serving.PrometheusConfig")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig"))


def monitoring_config_parse(text: str) -> MonitoringOptions:
    """A MonitoringConfig in text format; raises ValueError on a malformed one."""
    try:
        config = text_format.Parse(text, _config_class()())
    except text_format.ParseError as exc:
        raise ValueError(f"Invalid monitoring_config_file: {exc}") from exc
    prometheus = config.prometheus_config
    path = prometheus.path or DEFAULT_PATH
    if not path.startswith("/"):
        raise ValueError(f"Invalid monitoring_config_file: path {path!r} must start with '/'")
    return MonitoringOptions(prometheus=prometheus.enable, path=path)


def monitoring_config_text(options: MonitoringOptions) -> str:
    """The MonitoringConfig text a --monitoring_config_file holds for these options."""
    config = _config_class()()
    config.prometheus_config.enable = options.prometheus
    config.prometheus_config.path = options.path
    return str(text_format.MessageToString(config))


def monitoring_config_read(path: Path) -> MonitoringOptions:
    return monitoring_config_parse(path.read_text())


class _Counter:
    def __init__(self, name: str, help_text: str, labels: Sequence[str]) -> None:
        self.name, self.help, self.labels = name, help_text, tuple(labels)
        self.values: dict[tuple[str, ...], float] = {}

    def add(self, labels: tuple[str, ...], amount: float) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def family(self) -> Metric:
        # A Metric, not CounterMetricFamily: TF Serving's samples carry no `_total` suffix.
        family = Metric(self.name, self.help, "counter")
        for labels, value in sorted(self.values.items()):
            family.add_sample(self.name, dict(zip(self.labels, labels, strict=True)), value)
        return family


class _Histogram:
    def __init__(self, name: str, help_text: str, labels: Sequence[str],
                 bounds: tuple[float, ...]) -> None:
        self.name, self.help, self.labels, self.bounds = name, help_text, tuple(labels), bounds
        self.cells: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def add(self, labels: tuple[str, ...], value: float) -> None:
        counts, total = self.cells.setdefault(labels, ([0] * (len(self.bounds) + 1), [0.0]))
        counts[bisect.bisect_right(self.bounds, value)] += 1  # the first bound above value
        total[0] += value

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        for labels, (counts, total) in sorted(self.cells.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
                cumulative += count
                # As TF Serving's exporter writes a bound (absl::StrCat: six digits).
                buckets.append(("+Inf" if bound == float("inf") else f"{bound:.6g}", cumulative))
            family.add_metric(list(labels), buckets, sum_value=total[0])
        return family


def _name(tf_name: str) -> str:
    return tf_name.replace("/", ":")


class ServingMetrics:
    """The model server's metrics; thread-safe. `exposition()` is the Prometheus text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        serving = "/tensorflow/serving/"
        self._request_count = _Counter(
            _name(serving + "request_count"), "The total number of requests.",
            ("model_name", "status"))
        self._request_latency = _Histogram(
            _name(serving + "request_latency"),
            "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
            ("model_name", "API", "entrypoint"), _LATENCY)
        self._runtime_latency = _Histogram(
            _name(serving + "runtime_latency"),
            "Distribution of wall time (in microseconds) for Tensorflow runtime.",
            ("model_name", "API", "runtime"), _LATENCY)
        batching = serving + "batching_session/"
        self._queuing = _Histogram(
            _name(batching + "queuing_latency"),
            "Distribution of wall time spent (in microseconds) in queuing",
            ("thread_pool_name",), _QUEUING)
        # TF Serving keeps these three as percentile samplers, which Prometheus has no type
        # for: exported here as histograms under the same names.
        self._input_size = _Histogram(
            _name(batching + "input_batch_size"), "Tracks the batch size distribution on "
            "the inputs by thread_pool_name.", ("thread_pool_name",), _SIZES)
        self._processed_size = _Histogram(
            _name(batching + "processed_batch_size"), "Tracks the batch size distribution on "
            "processing by thread_pool_name.", ("thread_pool_name",), _SIZES)
        self._padding = _Histogram(
            _name(batching + "padding_size"), "Tracks the padding size distribution on "
            "batches by thread_pool_name.", ("thread_pool_name",), _SIZES)
        saved_model = "/tensorflow/cc/saved_model/"
        self._load_attempts = _Counter(
            _name(saved_model + "load_attempt_count"),
            "The number of times a SavedModel was successfully loaded.", ("model_path", "status"))
        self._load_latency = _Counter(
            _name(saved_model + "load_latency"),
            "Latency in microseconds for SavedModels that were successfully loaded.",
            ("model_path",))
        self._warmup = _Histogram(
            _name(serving + "model_warmup_latency"),
            "Distribution of wall time (in microseconds) for warming up the model.",
            ("model_path", "status"), _LATENCY)
        self._version_count = _Counter(
            VERSION_REQUEST_COUNT, "request_count of each model version that answered.",
            ("model_name", "model_version", "status"))
        self._version_latency = _Histogram(
            VERSION_REQUEST_LATENCY, "request_latency (microseconds) of each model version that "
            "answered.", ("model_name", "model_version", "API", "entrypoint"), _LATENCY)
        self._counters = (self._request_count, self._load_attempts, self._load_latency,
                          self._version_count)
        self._histograms = (
            self._request_latency, self._runtime_latency, self._version_latency, self._queuing,
            self._input_size, self._processed_size, self._padding, self._warmup,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # ---- recording ------------------------------------------------------------------------

    def request(self, *, model_name: str, api: str, entrypoint: str, latency_us: float,
                status: str, version: int | None = None) -> None:
        """RecordModelRequestCount, and RecordRequestLatency for requests that succeeded; the
        same per version when the request got as far as one (a bad name or label does not)."""
        with self._lock:
            self._request_count.add((model_name, status), 1)
            if status == "OK":
                self._request_latency.add((model_name, api, entrypoint), latency_us)
            if version is None:
                return
            self._version_count.add((model_name, str(version), status), 1)
            if status == "OK":
                self._version_latency.add((model_name, str(version), api, entrypoint),
                                          latency_us)

    def runtime(self, *, model_name: str, api: str, latency_us: float) -> None:
        with self._lock:
            self._runtime_latency.add((model_name, api, RUNTIME), latency_us)

    def batch(self, *, queued_us: Sequence[float], size: int, padded: int) -> None:
        """One batch run: each task's time in the queue, its rows and the rows it ran with."""
        with self._lock:
            for latency in queued_us:
                self._queuing.add((THREAD_POOL,), latency)
            self._input_size.add((THREAD_POOL,), size)
            self._processed_size.add((THREAD_POOL,), padded)
            self._padding.add((THREAD_POOL,), padded - size)

    def load(self, *, model_path: str, latency_us: float, ok: bool) -> None:
        with self._lock:
            self._load_attempts.add((model_path, "success" if ok else "fail"), 1)
            if ok:
                self._load_latency.add((model_path,), latency_us)

    def warmup(self, *, model_path: str, latency_us: float, status: str) -> None:
        """`status` as TF Serving's Status::ToString(): "OK" or "CODE: message"."""
        with self._lock:
            self._warmup.add((model_path, status), latency_us)

    # ---- exposition -----------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = [c.family() for c in self._counters if c.values]
            families += [h.family() for h in self._histograms if h.cells]
        yield from families

    def exposition(self) -> bytes:
        text = generate_latest(self.registry).decode()
        # prometheus_client names a counter family `<name>_total` in HELP/TYPE; TF Serving's
        # exporter names it as its samples are named.
        for counter in self._counters:
            for kind in ("HELP", "TYPE"):
                text = text.replace(f"# {kind} {counter.name}_total ", f"# {kind} {counter.name} ")
        return text.encode()


def since_us(started: float) -> float:
    """Microseconds since a time.perf_counter() reading."""
    return (time.perf_counter() - started) * 1e6


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts and times PredictionService calls as prediction_service_impl.cc does."""

    def __init__(self, *, metrics: ServingMetrics) -> None:
        self._metrics = metrics

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        service, _, api = handler_call_details.method.rpartition("/")
        if handler is None or service != _PREDICTION_SERVICE or api not in _APIS:
            return handler
        inner = handler.unary_unary
        metrics = self._metrics

        def timed(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            served_version_set(None)  # this thread's previous request may have set it
            status = "OK"
            try:
                return inner(request, context)
            except BaseException:
                code = context.code()
                status = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
                raise
            finally:
                metrics.request(model_name=_model_name(request), api=api, entrypoint="GRPC",
                                latency_us=since_us(started), status=status,
                                version=served_version())

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _model_name(request: Any) -> str:
    return str(request.model_spec.name)
