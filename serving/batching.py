"""Server-side batching of session runs, after TF Serving's BatchingSession.

Concurrent runs of the same servable with the same feeds and fetches are queued, concatenated
along dimension 0, run once and split back. A batch runs when it is full or when its oldest task
has waited batch_timeout_micros, whichever comes first. Unlike TF Serving, tasks whose inner
dimensions differ go to separate queues instead of failing the whole batch.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from serving.config import BatchingOptions
from serving.errors import Code, ServingError, invalid_argument
from serving.metrics import ServingMetrics
from serving.servable import Servable


class Runner(Protocol):
    def run(
        self,
        *,
        servable: Servable,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int,
    ) -> list[np.ndarray]: ...

    def close(self) -> None: ...


class DirectRunner:
    """Batching off: every request is its own session run."""

    def run(
        self,
        *,
        servable: Servable,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int,
    ) -> list[np.ndarray]:
        return servable.run(feeds=feeds, fetches=fetches, timeout_ms=timeout_ms)

    def close(self) -> None:
        return None


@dataclass
class _Task:
    feeds: Mapping[str, np.ndarray]
    size: int
    deadline: float | None
    timeout_ms: int
    future: Future[list[np.ndarray]] = field(default_factory=Future)
    queued: float = field(default_factory=time.monotonic)


@dataclass
class _Batch:
    opened: float
    tasks: list[_Task] = field(default_factory=list)
    size: int = 0
    closed: bool = False


@dataclass
class _Queue:
    key: tuple[Any, ...]
    servable: Servable
    feed_names: tuple[str, ...]
    fetches: tuple[str, ...]
    batches: deque[_Batch] = field(default_factory=deque)


def batch_size(feeds: Mapping[str, np.ndarray]) -> int:
    """ComputeTensorBatchSize: every input batched, all with the same dimension 0."""
    if not feeds:
        raise invalid_argument("Batching Run() must have at least one input tensor")
    sizes = set()
    for array in feeds.values():
        if array.ndim == 0:
            raise invalid_argument("Batching Run() input tensors must have at least one dimension")
        sizes.add(array.shape[0])
    if len(sizes) > 1:
        raise invalid_argument("Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


class BatchingRunner:
    def __init__(self, *, options: BatchingOptions) -> None:
        self._options = options
        self._cond = threading.Condition()
        self._queues: dict[tuple[Any, ...], _Queue] = {}
        self._stopped = False
        self.metrics: ServingMetrics | None = None  # queueing and batch sizes, when set
        count = options.num_batch_threads or os.cpu_count() or 1
        self._threads = [
            threading.Thread(target=self._work, name=f"batch-{index}", daemon=True)
            for index in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def run(
        self,
        *,
        servable: Servable,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int,
    ) -> list[np.ndarray]:
        size = batch_size(feeds)
        if size > self._options.max_batch_size and self._options.enable_large_batch_splitting:
            # Splitting only changes how the rows are grouped, not the answer.
            return servable.run(feeds=feeds, fetches=fetches, timeout_ms=timeout_ms)
        return self.submit(
            servable=servable, feeds=feeds, fetches=fetches, timeout_ms=timeout_ms
        ).result()

    def accepts(self, feeds: Mapping[str, np.ndarray]) -> bool:
        """Whether submit() takes these feeds (rows within max_batch_size)."""
        return batch_size(feeds) <= self._options.max_batch_size

    def submit(
        self,
        *,
        servable: Servable,
        feeds: Mapping[str, np.ndarray],
        fetches: Sequence[str],
        timeout_ms: int,
    ) -> Future[list[np.ndarray]]:
        """Queues one task and returns at once: its future holds the rows' outputs or the error.

        For callers that must not block, such as the REST server's event loop.
        """
        size = batch_size(feeds)
        limit = self._options.max_batch_size
        if size > limit:
            raise invalid_argument(
                f"Task size {size} is larger than maximum input batch size {limit}"
            )
        names = tuple(sorted(feeds))
        shapes = tuple((feeds[n].dtype.str, feeds[n].shape[1:]) for n in names)
        key = (id(servable), names, tuple(fetches), shapes)
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None
        task = _Task(feeds=feeds, size=size, deadline=deadline, timeout_ms=timeout_ms)
        with self._cond:
            if self._stopped:
                raise ServingError(Code.UNAVAILABLE, "Batch scheduler is shutting down")
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(key, servable, names, tuple(fetches))
            try:
                self._enqueue(queue, task)
            finally:
                # Even a refused task may have closed the open batch, which can run now.
                self._cond.notify()
        return task.future

    def pending(self) -> int:
        """Tasks queued and not yet taken by a batch thread (the queue depth TF Serving exports)."""
        with self._cond:
            return sum(len(b.tasks) for q in self._queues.values() for b in q.batches)

    def _enqueue(self, queue: _Queue, task: _Task) -> None:
        limit = self._options.max_batch_size
        batch = queue.batches[-1] if queue.batches and not queue.batches[-1].closed else None
        if batch is not None and batch.size + task.size > limit:
            batch.closed = True
            batch = None
        if batch is None:
            if len(queue.batches) >= self._options.max_enqueued_batches:
                raise ServingError(
                    Code.UNAVAILABLE,
                    "The batch scheduling queue to which this task was submitted is full; "
                    f"currently {len(queue.batches)} batches enqueued and max_enqueued_batches "
                    f"is {self._options.max_enqueued_batches}",
                )
            batch = _Batch(opened=time.monotonic())
            queue.batches.append(batch)
        batch.tasks.append(task)
        batch.size += task.size
        batch.closed = batch.size >= limit

    def _take_ready(self) -> tuple[float | None, tuple[_Queue, _Batch] | None]:
        """The oldest schedulable batch, or how long until one might be."""
        now = time.monotonic()
        timeout = self._options.batch_timeout_micros / 1e6
        best: tuple[_Queue, _Batch] | None = None
        wait: float | None = None
        for queue in self._queues.values():
            batch = queue.batches[0]
            if batch.closed or now >= batch.opened + timeout:
                if best is None or batch.opened < best[1].opened:
                    best = (queue, batch)
            else:
                remaining = batch.opened + timeout - now
                wait = remaining if wait is None else min(wait, remaining)
        if best is not None:
            queue, batch = best
            queue.batches.popleft()
            if not queue.batches:
                del self._queues[queue.key]
        return wait, best

    def _work(self) -> None:
        while True:
            with self._cond:
                wait, ready = self._take_ready()
                while ready is None:
                    if self._stopped:
                        return
                    self._cond.wait(wait)
                    wait, ready = self._take_ready()
            self._process(*ready)

    def _process(self, queue: _Queue, batch: _Batch) -> None:
        now = time.monotonic()
        tasks = []
        for task in batch.tasks:
            if task.deadline is not None and now > task.deadline:
                task.future.set_exception(
                    ServingError(
                        Code.RESOURCE_EXHAUSTED,
                        "Run() timeout exceeded while waiting in batching queue",
                    )
                )
            else:
                tasks.append(task)
        if not tasks:
            return
        try:
            outputs, _total = self._run_merged(queue, tasks)
        except ServingError as exc:
            for task in tasks:
                task.future.set_exception(exc)
            return
        except Exception as exc:  # a failed batch must still answer every caller
            error = ServingError(Code.INTERNAL, str(exc))
            for task in tasks:
                task.future.set_exception(error)
            return
        offset = 0
        for task in tasks:
            task.future.set_result([out[offset : offset + task.size] for out in outputs])
            offset += task.size

    def _run_merged(self, queue: _Queue, tasks: list[_Task]) -> tuple[list[np.ndarray], int]:
        merged = {
            name: np.concatenate([task.feeds[name] for task in tasks]) for name in queue.feed_names
        }
        total = sum(task.size for task in tasks)
        padded = next((s for s in self._options.allowed_batch_sizes if s >= total), total)
        if padded > total:
            # Pad with copies of the first row, as BatchingSession does, then drop them.
            merged = {
                name: np.concatenate([array, np.repeat(array[:1], padded - total, axis=0)])
                for name, array in merged.items()
            }
        timeout_ms = max(task.timeout_ms for task in tasks)
        if self.metrics is not None:
            now = time.monotonic()
            self.metrics.batch(queued_us=[(now - task.queued) * 1e6 for task in tasks],
                               size=total, padded=padded)
        outputs = queue.servable.run(feeds=merged, fetches=queue.fetches, timeout_ms=timeout_ms)
        for output in outputs:
            if output.ndim == 0:
                raise ServingError(
                    Code.FAILED_PRECONDITION, "Batched output tensor has 0 dimensions"
                )
            if output.shape[0] != padded:
                raise ServingError(
                    Code.FAILED_PRECONDITION,
                    "Batched output tensor's 0th dimension does not equal the sum of the 0th "
                    "dimension sizes of the input tensors",
                )
        return outputs, total

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            pending = [t for q in self._queues.values() for b in q.batches for t in b.tasks]
            self._queues.clear()
            self._cond.notify_all()
        for task in pending:
            task.future.set_exception(ServingError(Code.UNAVAILABLE, "Server is shutting down"))
        for thread in self._threads:
            thread.join(timeout=5)
