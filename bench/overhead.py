"""Item 2: what going through the platform costs a training run, against a plain script.

(a) Steady-state images/sec through the platform ÷ the same model, data and batch in a plain
    `model.fit` script (bench/plain_fit.py), measured side by side: both run at the same time, the
    whole platform (web, scheduler, worker node, model server, the trial it starts, and this
    benchmark's own polling) pinned to one core and the script to the other, swapping cores every
    repeat. Both sides then see the same moment's machine, so the ratio keeps the platform's
    overhead and loses the VM's drift (±10 % over seconds), which made runs one after the other
    differ by more than the 3 % this target is about. Only epochs that lie wholly inside the other
    side's training count. The target is the median of the repeats' platform ÷ script ratios.
(b) Submit → first training step through the platform (its `first_step_at`) ÷ the plain
    script's process start → first step (taken just before Popen; the script records its first
    step's end with on_train_batch_end(0)), from runs one after the other on the whole machine:
    the node as it runs (a warm trial process), then the node restarted to start every task cold
    (COLD_NODE: a new sandbox, a new Python importing TensorFlow), each cold run paired with a
    script run just before or after it.
    These runs also give images/sec on both cores, fit's epoch and the wall-clock epoch cycle (so
    the platform's per-epoch checkpoint and reporting count against it), shown for reference.

Sequential repeats are interleaved, alternating which side goes first. Before every run the
machine is let go quiet, and after a platform run the node has first refilled its warm trial
process, as a node between jobs would have.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import stats
from bench.affinity import container_pids, cpus_available, process_tree, processes_pin
from bench.api import PlatformClient
from bench.quiet import wait_quiet
from bench.report import BarChart, Section, Table, Target, number
from bench.runs import EpochRecord, TrainingRun, Workload, platform_run
from training.supervisor.warm import REFILL_DELAY_SECONDS

ROOT = Path(__file__).resolve().parents[1]
# By then the node's replacement warm process has been importing TensorFlow (~4 s of one core)
# for a while, so waiting for a quiet machine waits for the import to end.
REFILL_STARTED_SECONDS = REFILL_DELAY_SECONDS + 1.5
# Polls cost the web process CPU on the platform's side; the run's end can wait a little.
POLL_SECONDS = 3.0
THROUGHPUT_RATIO = 0.98  # the performance round's goal (issue #43)
BETWEEN_EPOCHS_MS = 10.0  # the same round's goal on the bench model
# The same round's goals for the first step: a warm node's against a cold script's, and a node
# that starts every task cold (sandbox on, no warm process, no fork server) against that script.
FIRST_STEP_WARM_RATIO = 0.25
FIRST_STEP_COLD_RATIO = 1.1
# A node whose tasks all start cold: what the cold start costs when nothing was prepared.
COLD_NODE = {"PLATFORM_WARM_TRIAL_PROCESSES": "0", "PLATFORM_TASK_FORK_SERVER": "false"}


def plain_run(*, workload: Workload, keras_callbacks: bool = False) -> TrainingRun:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "TF_CONFIG")}
    env |= {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as scratch:
        out = Path(scratch) / "result.json"
        args = [
            sys.executable, "-m", "bench.plain_fit", "--out", str(out),
            "--model", workload.model, "--dataset", workload.dataset,
            "--epochs", str(workload.epochs), "--batch-size", str(workload.batch_size),
            "--learning-rate", str(workload.learning_rate),
            "--hidden-units", str(workload.hidden_units),
            *(["--keras-callbacks"] if keras_callbacks else []),
        ]
        started = time.time()
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=600,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"plain_fit failed ({done.returncode}):\n"
                               f"{done.stderr.decode(errors='replace')[-3000:]}")
        result = json.loads(out.read_text())
    return TrainingRun(
        label="Keras-callbacks script" if keras_callbacks else "plain script",
        epochs=[EpochRecord(epoch=e["epoch"], images_per_sec=e["images_per_sec"],
                            seconds=e["seconds"], ended_at=e["ended_at"],
                            val_accuracy=e["val_accuracy"]) for e in result["epochs"]],
        global_batch=int(result["global_batch"]),
        started_at=started,
        first_step_at=result["first_step_at"],
    )


def _between_epochs_ms(run: TrainingRun) -> float | None:
    """Wall-clock time from one epoch's end to the next one's start, median over the run."""
    pauses = [(later.ended_at - earlier.ended_at - later.seconds) * 1000
              for earlier, later in itertools.pairwise(run.epochs)]
    return stats.median(pauses) if pauses else None


def _spread(values: list[float | None]) -> str:
    present = sorted(v for v in values if v is not None)
    return f"{present[0]:.1f} – {present[-1]:.1f}" if present else "–"


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return stats.median(present) if present else None


def _cold_starts(client: PlatformClient, *, workload: Workload, repeats: int,
                 node_restart: Callable[..., None] | None,
                 settle: Callable[[], None]) -> list[tuple[TrainingRun, TrainingRun]]:
    """(cold platform run, plain script run) pairs, the order alternating; the node runs as it
    did before once they are done."""
    if node_restart is None:
        return []
    pairs = []
    node_restart(**COLD_NODE)
    try:
        for repeat in range(repeats):
            runs = {}
            for side in ("platform", "plain") if repeat % 2 == 0 else ("plain", "platform"):
                settle()
                runs[side] = (platform_run(client, label="platform, cold node", workload=workload,
                                           resources={"workers": 1}, poll_seconds=POLL_SECONDS)
                              if side == "platform" else plain_run(workload=workload))
            pairs.append((runs["platform"], runs["plain"]))
    finally:
        node_restart()
    return pairs


@dataclass(frozen=True)
class SidePair:
    platform: TrainingRun
    plain: TrainingRun
    platform_cpu: int
    platform_rate: float
    plain_rate: float
    overlap: float  # share of both runs' steady epochs that ran while the other side trained

    @property
    def ratio(self) -> float:
        return self.platform_rate / self.plain_rate


def _side_by_side(client: PlatformClient, *, stack_pids: list[int], workload: Workload,
                  platform_cpu: int, plain_cpu: int, lead_seconds: float) -> SidePair | None:
    everything = cpus_available()
    # A warm container is there before the run; a trial under a container runtime uses it.
    platform_side = [*stack_pids, os.getpid(), *container_pids()]
    processes_pin(process_tree(platform_side), cpus={platform_cpu})
    try:
        wait_quiet(timeout=30)
        box: dict[str, TrainingRun] = {}

        def script() -> None:
            # A child inherits the affinity of the thread that forks it.
            os.sched_setaffinity(0, {plain_cpu})
            box["plain"] = plain_run(workload=workload)

        thread = threading.Thread(target=script, name="plain-script")
        thread.start()
        # The script spends seconds importing TensorFlow before its first step; the platform's
        # warm process does not, so it starts later to train over the same seconds.
        time.sleep(lead_seconds)
        platform = platform_run(client, label="platform", workload=workload,
                                resources={"workers": 1}, poll_seconds=POLL_SECONDS)
        thread.join()
    finally:
        processes_pin(process_tree(platform_side), cpus=everything)
    plain = box["plain"]
    platform_rate = platform.steady_images_per_sec_within(plain.span)
    plain_rate = plain.steady_images_per_sec_within(platform.span)
    if platform_rate is None or plain_rate is None:
        return None  # they did not train at the same time
    overlapping = (len(platform.steady_epochs_within(plain.span))
                   + len(plain.steady_epochs_within(platform.span)))
    steady = len(platform.epochs) + len(plain.epochs) - 2
    return SidePair(platform=platform, plain=plain, platform_cpu=platform_cpu,
                    platform_rate=platform_rate, plain_rate=plain_rate,
                    overlap=overlapping / steady if steady else 0.0)


def overhead_measure(client: PlatformClient, *, stack_pids: list[int], workload: Workload,
                     repeats: int, side_workload: Workload, side_repeats: int,
                     node_restart: Callable[..., None] | None = None) -> Section:
    """`node_restart(**env)`: the stack's node again with these settings (Stack.worker_restart);
    without it, the cold start is not measured."""
    started = time.monotonic()
    platform: list[TrainingRun] = []
    plain: list[TrainingRun] = []
    with_callbacks: list[TrainingRun] = []
    spacing = REFILL_STARTED_SECONDS
    platform_ended = time.monotonic() - spacing

    def settle() -> None:
        # Neither side may run while the node imports TensorFlow into a new warm process, which
        # it starts a moment after a trial has ended.
        time.sleep(max(0.0, platform_ended + spacing - time.monotonic()))
        wait_quiet(timeout=30)

    sides = ("platform", "plain", "callbacks")
    for repeat in range(repeats):
        for side in sides[repeat % 3:] + sides[:repeat % 3]:
            settle()
            if side == "platform":
                platform.append(platform_run(client, label="platform", workload=workload,
                                             resources={"workers": 1},
                                             poll_seconds=POLL_SECONDS))
                platform_ended = time.monotonic()
            elif side == "plain":
                plain.append(plain_run(workload=workload))
            else:
                with_callbacks.append(plain_run(workload=workload, keras_callbacks=True))
    first_platform = _median([r.first_step_seconds for r in platform])
    first_plain = _median([r.first_step_seconds for r in plain])
    lead = max(0.0, (first_plain or 0.0) - (first_platform or 0.0))

    cpus = sorted(cpus_available())
    pairs: list[SidePair] = []
    unpaired = 0
    if len(cpus) >= 2:
        for repeat in range(side_repeats):
            settle()
            mine, theirs = (cpus[0], cpus[1]) if repeat % 2 == 0 else (cpus[1], cpus[0])
            pair = _side_by_side(client, stack_pids=stack_pids, workload=side_workload,
                                 platform_cpu=mine, plain_cpu=theirs, lead_seconds=lead)
            platform_ended = time.monotonic()
            if pair is None:
                unpaired += 1
            else:
                pairs.append(pair)
    cold = _cold_starts(client, workload=dataclasses.replace(workload, epochs=2),
                        repeats=repeats, node_restart=node_restart, settle=settle)
    first_cold = _median([r.first_step_seconds for r, _ in cold])
    first_cold_plain = _median([r.first_step_seconds for _, r in cold])
    side_ratio = stats.median([p.ratio for p in pairs]) if pairs else None
    side_interval = stats.median_interval([p.ratio for p in pairs]) if pairs else None

    paired = [a.steady_images_per_sec / b.steady_images_per_sec
              for a, b in zip(platform, plain, strict=True)]
    interval = stats.median_interval(paired)
    between_platform = _median([_between_epochs_ms(r) for r in platform])
    between_callbacks = _median([_between_epochs_ms(r) for r in with_callbacks])
    wall_platform = _median([r.wall_images_per_sec for r in platform])
    wall_plain = _median([r.wall_images_per_sec for r in plain])
    rows = [
        ("images/sec side by side, one core each (median of repeats)",
         number(_median([p.platform_rate for p in pairs]), 0),
         number(_median([p.plain_rate for p in pairs]), 0), number(side_ratio, 3)),
        (f"its {side_interval.coverage:.1%} confidence interval (distribution-free)"
         if side_interval else "its confidence interval", "", "",
         f"{side_interval.low:.3f} – {side_interval.high:.3f}" if side_interval else "–"),
        ("images/sec one after the other, both cores, fit's epoch (paired median)",
         number(stats.median([r.steady_images_per_sec for r in platform]), 0),
         number(stats.median([r.steady_images_per_sec for r in plain]), 0),
         f"{stats.median(paired):.3f} ({interval.low:.3f} – {interval.high:.3f})"),
        ("images/sec one after the other, epoch cycle on the wall clock",
         number(wall_platform, 0), number(wall_plain, 0),
         number(stats.ratio(wall_platform, wall_plain), 3)),
        ("between epochs (checkpoints, reporting), ms",
         number(between_platform, 1),
         number(_median([_between_epochs_ms(r) for r in plain]), 1), ""),
        ("between epochs, ms: the script with ModelCheckpoint, BackupAndRestore, TensorBoard",
         number(between_platform, 1), number(between_callbacks, 1),
         number(stats.ratio(between_platform, between_callbacks), 3)),
        (f"  its spread over {repeats} repeat(s) (platform; callbacks script)",
         _spread([_between_epochs_ms(r) for r in platform]),
         _spread([_between_epochs_ms(r) for r in with_callbacks]), ""),
        ("start → first training step, s (platform: submit; script: Popen)",
         number(first_platform, 2), number(first_plain, 2),
         number(stats.ratio(first_platform, first_plain), 3)),
        ("  the same, a node that starts every task cold, each run paired with a script's",
         number(first_cold, 2), number(first_cold_plain, 2),
         number(stats.ratio(first_cold, first_cold_plain), 3)),
    ]
    notes = [
        f"Side by side: {len(pairs)} repeat(s) of {side_workload.epochs} epochs, the platform "
        f"starting {lead:.1f} s after the script (the difference of their medians from start to "
        "first step below); per repeat platform / script images/sec (platform's core, share of "
        "steady epochs overlapping the other side): "
        + "; ".join(f"{p.platform_rate:,.0f} / {p.plain_rate:,.0f} = {p.ratio:.3f} "
                    f"(CPU {p.platform_cpu}, {p.overlap:.0%})" for p in pairs) + "."
        + (f" {unpaired} repeat(s) did not overlap and were left out." if unpaired else ""),
        f"One after the other: {repeats} interleaved repeat(s) of {workload.epochs} epochs; per "
        "repeat (platform / plain) images/sec "
        + "; ".join(f"{a.steady_images_per_sec:,.0f} / {b.steady_images_per_sec:,.0f} "
                    f"({ratio:.3f})"
                    for a, b, ratio in zip(platform, plain, paired, strict=True))
        + "; first step s "
        + "; ".join(f"{number(a.first_step_seconds, 2)} / {number(b.first_step_seconds, 2)}"
                    for a, b in zip(platform, plain, strict=True)) + ".",
    ]
    if cold:
        settings = ", ".join(f"{k}={v}" for k, v in COLD_NODE.items())
        notes.append(
            f"Cold starts: the node restarted with {settings}"
            f" ({os.environ.get('PLATFORM_TRIAL_RUNTIME') or 'sandbox'} runtime), {len(cold)}"
            " run(s) of 2 epochs, each with a plain script run just before or after it; first"
            " step s (cold platform / script) "
            + "; ".join(f"{number(a.first_step_seconds, 2)} / {number(b.first_step_seconds, 2)}"
                        for a, b in cold) + ". The node then ran as before.")
    else:
        notes.append("Cold starts were not measured (no stack to restart the node in).")
    if len(cpus) < 2:
        notes.append("This process may use one CPU only: the side-by-side runs need two.")
    if not any(r.extra.get("has_first_step_at") for r in platform):
        notes.append("The experiment API has no first_step_at field in this version: (b) "
                     "could not be measured.")
    return Section(
        title="2. Platform overhead on training",
        description=(
            f"Workload: {side_workload.describe()}, one process (default strategy). A platform "
            "run is REST submit → scheduler → worker node → trial process; the plain script "
            "(bench/plain_fit.py) does the same work with the same zoo model, arrays, tf.data "
            "pipeline, compile and seed. The target's runs are side by side: both at once, the "
            "whole platform (and this benchmark's polling) pinned to one core, the script to the "
            "other, cores swapped every repeat; medians of the steady epochs that overlap the "
            "other side's training, then over repeats."
        ),
        tables=[Table(columns=("measure", "platform", "plain script", "platform ÷ plain"),
                      rows=rows)],
        targets=[
            Target("training images/sec, platform ÷ plain (side by side, one core each; median "
                   "over repeats)", side_ratio, ">=", THROUGHPUT_RATIO),
            Target("start → first step, warm platform ÷ cold plain script",
                   stats.ratio(first_platform, first_plain), "<=", FIRST_STEP_WARM_RATIO),
            Target("start → first step, cold platform ÷ cold plain script",
                   stats.ratio(first_cold, first_cold_plain), "<=", FIRST_STEP_COLD_RATIO),
            Target("between epochs, platform ÷ the Keras-callbacks script",
                   stats.ratio(between_platform, between_callbacks), "<=", 1.0),
            Target("between epochs, platform, ms", between_platform, "<=", BETWEEN_EPOCHS_MS),
        ],
        charts=[BarChart(
            "overhead_first_step.png", "Start to first training step", "seconds (median)",
            ("platform (submit → first step)", "plain script (Popen → first step)"),
            {"warm node": (first_platform, first_plain),
             "node starting tasks cold": (first_cold, first_cold_plain)},
        )],
        notes=notes,
        seconds=time.monotonic() - started,
    )
