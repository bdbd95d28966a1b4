"""One loaded SavedModel version, run the way TF Serving runs it.

TF Serving loads a SavedModel's MetaGraphDef into a C++ Session and feeds tensors by name.
tf.saved_model.load's signature functions would instead enforce each input's declared shape,
so `{"instances": [1.0, 2.0, 5.0]}` against half_plus_two's `[-1, 1]` input would fail where
TF Serving answers it. Loading the MetaGraphDef into a TF1 Session and running it through a
session callable (which feeds without Python-side shape checks) keeps TF Serving's semantics.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2

from serving.errors import Code, ServingError, code_from_int

DEFAULT_TAGS: tuple[str, ...] = ("serve",)


def load_error(exc: BaseException) -> ServingError:
    if isinstance(exc, tf.errors.OpError):
        return ServingError(code_from_int(exc.error_code), exc.message)
    if isinstance(exc, OSError):
        return ServingError(Code.NOT_FOUND, str(exc))
    return ServingError(Code.UNKNOWN, str(exc) or type(exc).__name__)



def session_config(
    *, intra_op_parallelism: int, inter_op_parallelism: int
) -> config_pb2.ConfigProto:
    """A servable's session threads, as TF Serving's --tensorflow_*_op_parallelism set them."""
    return config_pb2.ConfigProto(
        intra_op_parallelism_threads=intra_op_parallelism,
        inter_op_parallelism_threads=inter_op_parallelism,
    )

class Servable:
    """A SavedModel in its own graph and session; close() waits for in-flight runs."""

    def __init__(
        self,
        *,
        name: str,
        version: int,
        path: Path,
        tags: Sequence[str] = DEFAULT_TAGS,
        session_config: config_pb2.ConfigProto | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.path = path
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph, config=session_config)
        try:
            with self._graph.as_default():
                meta = tf.compat.v1.saved_model.loader.load(self._session, list(tags), str(path))
        except Exception as exc:
            self._session.close()
            raise load_error(exc) from exc
        self.meta_graph_def: meta_graph_pb2.MetaGraphDef = meta
        self._callables: dict[tuple[tuple[str, ...], tuple[str, ...], int], Any] = {}
        self._cond = threading.Condition()
        self._users = 0
        self._closing = False
        self.runs = 0  # session runs, so batching can be observed without timing

    @property
    def signatures(self) -> Mapping[str, meta_graph_pb2.SignatureDef]:
        return self.meta_graph_def.signature_def

    def _callable(self, feeds: tuple[str, ...], fetches: tuple[str, ...], timeout_ms: int) -> Any:
        key = (feeds, fetches, timeout_ms)
        with self._cond:
            found = self._callables.get(key)
        if found is not None:
            return found
        options = config_pb2.CallableOptions(feed=feeds, fetch=fetches)
        if timeout_ms > 0:
            options.run_options.timeout_in_ms = timeout_ms
        # The public make_callable() goes through Session.run's shape checks; this does not.
        made = self._session._make_callable_from_options(options)
        with self._cond:
            return self._callables.setdefault(key, made)

    def run(
        self,
        *,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int = 0,
    ) -> list[np.ndarray]:
        names = tuple(feeds)
        try:
            runner = self._callable(names, tuple(fetches), timeout_ms)
            with self._cond:
                self.runs += 1
            return list(runner(*(feeds[name] for name in names)))
        except tf.errors.OpError as exc:
            raise ServingError(code_from_int(exc.error_code), exc.message) from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise ServingError(Code.INVALID_ARGUMENT, str(exc)) from exc

    def acquire(self) -> bool:
        with self._cond:
            if self._closing:
                return False
            self._users += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._users -= 1
            if not self._users:
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            while self._users:
                self._cond.wait()
            self._callables.clear()
        self._session.close()
