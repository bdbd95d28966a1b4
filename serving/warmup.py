"""Loading a version as TF Serving does: timed, then warmed up with the SavedModel's own
`assets.extra/tf_serving_warmup_requests` (a TFRecord of PredictionLog protos) before the
manager makes it AVAILABLE. A warm-up that fails fails the load (saved_model_warmup_util.cc).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow_serving.apis import prediction_log_pb2

from serving.errors import Code, ServingError, invalid_argument
from serving.inference import Inference
from serving.metrics import ServingMetrics, since_us
from serving.servable import Servable

log = logging.getLogger(__name__)

ASSETS_EXTRA = "assets.extra"
REQUESTS_FILE = "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # WarmupConsts::kMaxNumRecords


def version_load(*, load: Callable[[], Servable], path: Path, inference: Inference,
                 metrics: ServingMetrics, warmup_iterations: int | None) -> Servable:
    """`load()` timed into the load metrics, then warmed up unless `warmup_iterations` is None
    (--enable_model_warmup=false)."""
    started = time.perf_counter()
    try:
        servable = load()
    except Exception:
        metrics.load(model_path=str(path), latency_us=since_us(started), ok=False)
        raise
    metrics.load(model_path=str(path), latency_us=since_us(started), ok=True)
    if warmup_iterations is None:
        return servable
    try:
        warmup_run(servable=servable, inference=inference, iterations=warmup_iterations,
                   metrics=metrics)
    except BaseException:
        servable.close()
        raise
    return servable


def _records(path: Path) -> Iterator[bytes]:
    try:
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            yield bytes(record)
    except tf.errors.DataLossError as exc:
        raise ServingError(
            Code.DATA_LOSS, f"{exc.message}. Please verify your warmup data is in TFRecord format."
        ) from exc
    except tf.errors.OpError as exc:
        raise ServingError(Code.UNKNOWN, exc.message) from exc


def warmup_run(*, servable: Servable, inference: Inference, iterations: int,
               metrics: ServingMetrics) -> int:
    """RunSavedModelWarmup: every record replayed `iterations` times against this version
    alone. Returns the records read; raises ServingError when one fails."""
    path = servable.path / ASSETS_EXTRA / REQUESTS_FILE
    if not path.is_file():
        log.info("No warmup data file found at %s", path)
        return 0
    started = time.perf_counter()
    status = "OK"
    count = 0
    log.info("Starting to read warmup data for model at %s", path)
    try:
        for record in _records(path):
            count += 1
            if count > MAX_RECORDS:
                raise invalid_argument(
                    f"Number of warmup records exceeds the maximum ({MAX_RECORDS}) at {path}")
            entry = prediction_log_pb2.PredictionLog()
            try:
                entry.ParseFromString(record)
            except DecodeError as exc:
                raise invalid_argument(
                    f"Failed to parse warmup record: {record!r} from {path}") from exc
            for _ in range(max(iterations, 1)):
                _replay(entry, servable=servable, inference=inference)
    except ServingError as exc:
        status = f"{exc.code.name}: {exc.message}"
        raise
    finally:
        metrics.warmup(model_path=str(servable.path), latency_us=since_us(started),
                       status=status)
    log.info(
        "Finished reading warmup data for model at %s. Number of warmup records read: %d.",
        path, count,
    )
    return count


def _replay(entry: prediction_log_pb2.PredictionLog, *, servable: Servable,
            inference: Inference) -> None:
    kind = entry.WhichOneof("log_type")
    if kind == "predict_log":
        request = entry.predict_log.request
        inference.run_predict(
            servable=servable, signature_name=request.model_spec.signature_name,
            inputs=dict(request.inputs), output_filter=list(request.output_filter),
            timeout_ms=0,
        )
    elif kind == "classify_log":
        classify = entry.classify_log.request
        inference.run_classify(servable=servable, signature_name=classify.model_spec.signature_name,
                               request_input=classify.input, timeout_ms=0)
    elif kind == "regress_log":
        regress = entry.regress_log.request
        inference.run_regress(servable=servable, signature_name=regress.model_spec.signature_name,
                              request_input=regress.input, timeout_ms=0)
    else:
        raise ServingError(Code.UNIMPLEMENTED, f"Unsupported log_type for warmup: {kind}")
