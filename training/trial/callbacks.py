"""Keras callbacks (plus one sampler thread) that turn training into events and checkpoints.

`EpochReporter` runs on every task: all of them save checkpoints (a collective under
MultiWorkerMirroredStrategy), but only the chief emits epoch metrics, since all-reduced metrics are
identical everywhere. Throughput comes from a thread sampling the optimizer's step counter every
few seconds, because parameter-server training forbids batch-level callbacks; it is per task.

`StopAtStep` turns SIGTERM into a clean stop at the next step boundary: it raises `Preempted` out
of `fit`, so the interrupted epoch is neither reported nor checkpointed and a restart redoes it from
the last completed epoch's checkpoint (the contract of tf-keras BackupAndRestore). Under parameter
servers the chief has no step hook, so there the signal handler raises at once instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from training.errors import UserCodeError
from training.events import EventWriter
from training.scaling import BatchPlan
from training.signals import StopFlag
from training.target import DEFAULT_METRIC, Target
from training.trial.checkpoints import Progress, TrainingState
from training.trial.modelling import learning_rate_current
from training.trial.tfenv import keras


class StopAtEpoch(keras.callbacks.Callback):
    def __init__(self, *, flag: StopFlag) -> None:
        super().__init__()
        self.flag = flag

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.flag.check()


class StopAtStep(StopAtEpoch):
    _supports_tf_logs = True  # logs unused: no per-step copy of the metrics to NumPy

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.flag.check()


class FirstStepReporter(keras.callbacks.Callback):
    """Reports when the first training step finished: the end of start-up as users feel it."""

    _supports_tf_logs = True  # logs unused: no per-step copy of the metrics to NumPy

    def __init__(self, *, events: EventWriter) -> None:
        super().__init__()
        self.events, self.done = events, False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.done:
            self.done = True
            self.events.emit("status", phase="first_step")  # the event carries the time


class ThroughputSampler(threading.Thread):
    """Emits images/sec from the optimizer's step counter until `halt` is set."""

    def __init__(self, *, events: EventWriter, model: Any, batch: BatchPlan,
                 interval_seconds: float, epoch: Callable[[], int]) -> None:
        super().__init__(name="throughput", daemon=True)
        self.events, self.model, self.batch = events, model, batch
        self.interval, self.epoch = interval_seconds, epoch
        self.halt = threading.Event()

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def run(self) -> None:
        try:
            last_step, last_time = self._step(), time.perf_counter()
            halted = False
            while not halted:
                # The last sample comes at halt, so training shorter than one interval still
                # reports its throughput.
                halted = self.halt.wait(self.interval)
                step, now = self._step(), time.perf_counter()
                if step > last_step:
                    rate = (step - last_step) * self.batch.global_batch_size / (now - last_time)
                    self.events.emit(
                        "throughput", epoch=self.epoch(), optimizer_step=step,
                        images_per_sec=round(rate, 1),
                        images_per_sec_per_replica=round(rate / self.batch.replicas, 1),
                    )
                last_step, last_time = step, now
        except Exception:  # noqa: S110 - a monitoring thread must never take training down
            pass


class EpochReporter(keras.callbacks.Callback):
    def __init__(
        self, *, events: EventWriter, state: TrainingState, progress: Progress, batch: BatchPlan,
        steps_per_epoch: int, interval_seconds: float, target: Target, stop_at_target: bool,
        is_chief: bool,
    ) -> None:
        super().__init__()
        self.events, self.state, self.progress, self.batch = events, state, progress, batch
        self.steps_per_epoch = steps_per_epoch
        self.interval = interval_seconds
        self.target, self.stop_at_target, self.is_chief = target, stop_at_target, is_chief
        self._epoch_start = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        # The epoch samples belong to; it stays on the last one for the sample taken at the end.
        self._epoch = self.progress.epochs_completed + 1
        self.sampler = ThroughputSampler(
            events=self.events, model=self.model, batch=self.batch,
            interval_seconds=self.interval, epoch=lambda: self._epoch,
        )
        self.sampler.start()

    def on_train_end(self, logs: Any = None) -> None:
        self.sampler.halt.set()
        self.sampler.join(timeout=10)  # its last sample is written before export starts

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch + 1
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        seconds = time.perf_counter() - self._epoch_start
        progress = self.progress
        progress.epochs_completed = epoch + 1
        progress.train_seconds += seconds
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        record: dict[str, Any] = {
            "epoch": epoch + 1, **metrics, "epoch_seconds": round(seconds, 3),
            "images_per_sec": round(self.steps_per_epoch * self.batch.global_batch_size / seconds,
                                    1),
            "learning_rate": learning_rate_current(model=self.model),
            "train_seconds": round(progress.train_seconds, 3),
        }
        target = self.target
        value = metrics.get(target.metric)
        if value is None:
            raise UserCodeError(
                f"the target metric {target.metric} is not among the metrics this model reports "
                f"({', '.join(sorted(metrics)) or 'none'}): name one of them"
            )
        reached_now = target.reached(value=value) and progress.time_to_target_seconds is None
        if reached_now:
            progress.time_to_target_seconds = round(progress.train_seconds, 3)
            record["time_to_target_seconds"] = progress.time_to_target_seconds
        is_best = target.better(new=value, old=progress.best_value)
        if is_best:
            progress.best_metric, progress.best_value = target.metric, value
            progress.best_epoch = epoch + 1
            if target.metric == DEFAULT_METRIC:
                progress.best_val_accuracy = value
        progress.history.append(record)
        path, best_path = self.state.save(progress=progress, best=is_best)
        if self.is_chief:
            self.events.emit("metric", **record)
            self.events.emit("checkpoint", epoch=epoch + 1, path=path, best=is_best,
                             best_path=best_path)
        if reached_now and self.stop_at_target:
            self.model.stop_training = True
