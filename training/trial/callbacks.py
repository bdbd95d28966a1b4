"""Keras callbacks (plus one sampler thread) that turn training into events and checkpoints.

`EpochReporter` runs on every task: all of them save checkpoints (a collective under
MultiWorkerMirroredStrategy), but only the chief emits epoch metrics, since all-reduced metrics are
identical everywhere. Throughput comes from a thread sampling the optimizer's step counter every
few seconds, because parameter-server training forbids batch-level callbacks; it is per task.

When checkpoints are taken (`Cadence`): at every epoch's end by default. With
`checkpoint_interval_seconds` > 0, at the first step boundary or epoch end once that long has
passed since the last one, at every epoch that improves on the best (its weights are the best's),
and after the last epoch. On SIGTERM, `StopAtStep` checkpoints the step training stopped at, then
raises `Preempted` out of `fit`; a restart trains the rest of that epoch. Mid-epoch checkpoints need
every task to stop at the same step, which only a single-process trial can promise: under
MultiWorkerMirroredStrategy a stop goes back to the last completed epoch and every epoch is
checkpointed (workers could not agree on a clock), and under parameter servers (no step hooks) the
signal handler raises at once, so the cadence applies at epoch ends only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from training.errors import UserCodeError
from training.events import EventWriter
from training.scaling import BatchPlan
from training.signals import StopFlag
from training.target import DEFAULT_METRIC, Target
from training.trial.checkpoints import Progress, Saved, TrainingState
from training.trial.modelling import learning_rate_current
from training.trial.tfenv import keras


@dataclass(frozen=True)
class Cadence:
    """When checkpoints are taken (see the module's docstring)."""

    interval_seconds: float = 0.0  # 0: every epoch's end
    mid_epoch: bool = True  # a single-process trial: mid-epoch checkpoints are safe

    def epoch_end_due(self, *, since_last: float, best: bool, last_epoch: bool) -> bool:
        if not self.interval_seconds or best or last_epoch:
            return True
        return since_last >= self.interval_seconds


class StopAtEpoch(keras.callbacks.Callback):
    def __init__(self, *, flag: StopFlag) -> None:
        super().__init__()
        self.flag = flag

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.flag.check()


class StopAtStep(StopAtEpoch):
    """Checks for a stop at every step boundary; checkpoints there first when `reporter` may
    (on the stop, and when the cadence's interval has passed)."""

    _supports_tf_logs = True  # logs unused: no per-step copy of the metrics to NumPy

    def __init__(self, *, flag: StopFlag, reporter: EpochReporter | None = None) -> None:
        super().__init__(flag=flag)
        self.reporter = reporter

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.reporter is not None and self.flag.requested:
            self.reporter.checkpoint_unsaved()
        self.flag.check()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        reporter = self.reporter
        if reporter is not None and (self.flag.requested or reporter.mid_epoch_due()) and not (
                reporter.checkpoint_mid_epoch(steps_done=batch + 1, stopping=self.flag.requested)):
            return  # the epoch's last step: its end saves it, and the next epoch's start stops
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
        steps_per_epoch: int, epochs: int, interval_seconds: float, target: Target,
        stop_at_target: bool, is_chief: bool, cadence: Cadence,
    ) -> None:
        super().__init__()
        self.events, self.state, self.progress, self.batch = events, state, progress, batch
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self.interval = interval_seconds
        self.target, self.stop_at_target, self.is_chief = target, stop_at_target, is_chief
        self.cadence = cadence
        self._epoch_start = 0.0
        self._epoch_offset = 0  # steps of the current epoch done before this attempt
        self._last_saved = time.monotonic()
        self._saved_epochs = progress.epochs_completed

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
        if self.progress.epochs_completed > self._saved_epochs:  # stopped early at the target
            self._save(best=False)
        self.state.settle()  # export and the result read what the last save wrote

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch + 1
        self._epoch_start = time.perf_counter()
        self._epoch_offset = self.progress.epoch_steps

    def mid_epoch_due(self) -> bool:
        cadence = self.cadence
        return bool(cadence.mid_epoch and cadence.interval_seconds
                    and time.monotonic() - self._last_saved >= cadence.interval_seconds)

    def checkpoint_mid_epoch(self, *, steps_done: int, stopping: bool) -> bool:
        """Checkpoints `steps_done` steps into this attempt's epoch; on a stop, waits for the
        write, as the process is about to end. False at the epoch's last step, whose end
        checkpoints it whole."""
        if not self.cadence.mid_epoch:
            return True
        steps = self._epoch_offset + steps_done
        if steps >= self.steps_per_epoch:
            return False
        progress = replace(self.progress, epoch_steps=steps, history=list(self.progress.history),
                           train_seconds=self.progress.train_seconds
                           + time.perf_counter() - self._epoch_start)
        self._last_saved = time.monotonic()
        self.state.save(progress=progress, written=self._on_written)
        if stopping:
            self.state.settle()
        return True

    def checkpoint_unsaved(self) -> None:
        """On a stop between epochs: the epochs the cadence left unsaved, written before the
        process ends."""
        if self.cadence.mid_epoch and self.progress.epochs_completed > self._saved_epochs:
            self._save(best=False)
        self.state.settle()

    def _save(self, *, best: bool) -> None:
        self._last_saved = time.monotonic()
        self._saved_epochs = self.progress.epochs_completed
        self.state.save(progress=self.progress, best=best, written=self._on_written)

    def _on_written(self, saved: Saved) -> None:
        if self.is_chief:
            self.events.emit("checkpoint", epoch=saved.epochs_completed, path=saved.path,
                             best=bool(saved.best_path), best_path=saved.best_path,
                             **({"epoch_steps": saved.epoch_steps} if saved.epoch_steps else {}))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        seconds = time.perf_counter() - self._epoch_start
        steps_run = self.steps_per_epoch - self._epoch_offset
        progress = self.progress
        progress.epochs_completed, progress.epoch_steps = epoch + 1, 0
        progress.train_seconds += seconds
        metrics = {k: float(v) for k, v in (logs or {}).items()}
        record: dict[str, Any] = {
            "epoch": epoch + 1, **metrics, "epoch_seconds": round(seconds, 3),
            "images_per_sec": round(steps_run * self.batch.global_batch_size / seconds, 1),
            "learning_rate": learning_rate_current(model=self.model),
            "train_seconds": round(progress.train_seconds, 3),
        }
        if self._epoch_offset:
            record["resumed_at_step"] = self._epoch_offset
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
        stopping = reached_now and self.stop_at_target
        last_epoch = stopping or epoch + 1 >= self.epochs
        if self.cadence.epoch_end_due(since_last=time.monotonic() - self._last_saved,
                                      best=is_best, last_epoch=last_epoch):
            self._save(best=is_best)
        if self.is_chief:
            self.events.emit("metric", **record)
        if stopping:
            self.model.stop_training = True
