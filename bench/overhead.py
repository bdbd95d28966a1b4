"""Item 2: what going through the platform costs a training run, against a plain script.

(a) Steady-state images/sec through the platform ÷ the same model, data and batch in a plain
    `model.fit` script (bench/plain_fit.py) run as a subprocess beside the idle stack. Two
    definitions, both medians over steady epochs then over repeats: fit's own epoch (begin →
    end, as both report it) and the epoch cycle on the wall clock (one epoch end to the next,
    so the platform's per-epoch checkpoint and reporting count against it, shown with the
    pause between epochs they make). The target is fit's epoch as a paired ratio: each
    repeat's platform run ÷ its adjacent plain run, median over repeats.
(b) Submit → first training step through the platform (its `first_step_at`) ÷ the plain
    script's process start → first step (taken just before Popen; the script records its first
    step's end with on_train_batch_end(0)).

Repeats are interleaved, alternating which side goes first. Before every run the machine is let
go quiet, and after a platform run the node has first refilled its warm trial process, as a node
between jobs would have.

On this VM one process's steady rate differs from the next one's by ~10 % (standard deviation),
more than it drifts within a run: the target's precision comes from the number of pairs, not from
epochs per run, and the report gives the median's distribution-free 95 % interval beside it.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import stats
from bench.api import PlatformClient
from bench.quiet import wait_quiet
from bench.report import BarChart, Section, Table, Target, number
from bench.runs import EpochRecord, TrainingRun, Workload, platform_run
from training.warm import REFILL_DELAY_SECONDS

ROOT = Path(__file__).resolve().parents[1]
# By then the node's replacement warm process has been importing TensorFlow (~4 s of one core)
# for a while, so waiting for a quiet machine waits for the import to end.
REFILL_STARTED_SECONDS = REFILL_DELAY_SECONDS + 1.5


def plain_run(*, workload: Workload) -> TrainingRun:
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
        ]
        started = time.time()
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, timeout=600,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"plain_fit failed ({done.returncode}):\n"
                               f"{done.stderr.decode(errors='replace')[-3000:]}")
        result = json.loads(out.read_text())
    return TrainingRun(
        label="plain script",
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


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return stats.median(present) if present else None


def overhead_measure(client: PlatformClient, *, workload: Workload, repeats: int) -> Section:
    started = time.monotonic()
    platform: list[TrainingRun] = []
    plain: list[TrainingRun] = []
    spacing = REFILL_STARTED_SECONDS
    platform_ended = time.monotonic() - spacing

    def settle() -> None:
        # Neither side may run while the node imports TensorFlow into a new warm process, which
        # it starts a moment after a trial has ended.
        time.sleep(max(0.0, platform_ended + spacing - time.monotonic()))
        wait_quiet(timeout=30)

    for repeat in range(repeats):
        for side in ("platform", "plain") if repeat % 2 == 0 else ("plain", "platform"):
            settle()
            if side == "platform":
                platform.append(platform_run(client, label="platform", workload=workload,
                                             resources={"workers": 1}))
                platform_ended = time.monotonic()
            else:
                plain.append(plain_run(workload=workload))
    # Each repeat's two runs are adjacent in time, so their ratio cancels the machine's drift
    # between repeats (this VM's throughput wanders by ±10 % over minutes); the target is the
    # median of those paired ratios. The ratio of the two medians is shown beside it.
    paired = [a.steady_images_per_sec / b.steady_images_per_sec
              for a, b in zip(platform, plain, strict=True)]
    fit_ratio = stats.median(paired)
    interval = stats.median_interval(paired)
    medians_ratio = stats.ratio(
        stats.median([r.steady_images_per_sec for r in platform]),
        stats.median([r.steady_images_per_sec for r in plain]),
    )
    wall_platform = _median([r.wall_images_per_sec for r in platform])
    wall_plain = _median([r.wall_images_per_sec for r in plain])
    pause_platform = _median([_between_epochs_ms(r) for r in platform])
    pause_plain = _median([_between_epochs_ms(r) for r in plain])
    first_platform = _median([r.first_step_seconds for r in platform])
    first_plain = _median([r.first_step_seconds for r in plain])
    rows = [
        ("images/sec, fit's epoch (begin → end)",
         number(stats.median([r.steady_images_per_sec for r in platform]), 0),
         number(stats.median([r.steady_images_per_sec for r in plain]), 0),
         number(medians_ratio, 3)),
        ("the same, median of each repeat's platform ÷ plain", "", "", number(fit_ratio, 3)),
        (f"its {interval.coverage:.1%} confidence interval (distribution-free)", "", "",
         f"{interval.low:.3f} – {interval.high:.3f}"),
        ("images/sec, epoch cycle on the wall clock", number(wall_platform, 0),
         number(wall_plain, 0), number(stats.ratio(wall_platform, wall_plain), 3)),
        ("between epochs (checkpoints, reporting), ms", number(pause_platform, 1),
         number(pause_plain, 1), ""),
        ("start → first training step, s (platform: submit; script: Popen)",
         number(first_platform, 2), number(first_plain, 2),
         number(stats.ratio(first_platform, first_plain), 3)),
    ]
    notes = [
        "Per repeat (platform / plain): images/sec "
        + "; ".join(f"{a.steady_images_per_sec:,.0f} / {b.steady_images_per_sec:,.0f} "
                    f"({ratio:.3f})"
                    for a, b, ratio in zip(platform, plain, paired, strict=True))
        + "; first step s "
        + "; ".join(f"{number(a.first_step_seconds, 2)} / {number(b.first_step_seconds, 2)}"
                    for a, b in zip(platform, plain, strict=True)) + ".",
    ]
    if not any(r.extra.get("has_first_step_at") for r in platform):
        notes.append("The experiment API has no first_step_at field in this version: (b) "
                     "could not be measured.")
    return Section(
        title="2. Platform overhead on training",
        description=(
            f"Workload: {workload.describe()}, one process (default strategy). {repeats} "
            "interleaved repeat(s) of a platform run (REST submit → scheduler → worker node → "
            "trial process) and the same work as a plain `model.fit` script (bench/plain_fit.py: "
            "same zoo model, arrays, tf.data pipeline, compile and seed); medians of steady "
            "epochs, then over repeats."
        ),
        tables=[Table(columns=("measure", "platform", "plain script", "platform ÷ plain"),
                      rows=rows)],
        targets=[
            Target("training images/sec, platform ÷ plain (steady epochs; median over "
                   "interleaved pairs)", fit_ratio, ">=", 0.97),
            Target("start → first step, platform ÷ plain", stats.ratio(first_platform, first_plain),
                   "<=", 1.0),
        ],
        charts=[BarChart(
            "overhead_first_step.png", "Start to first training step", "seconds (median)",
            ("platform (submit → first step)", "plain script (Popen → first step)"),
            {"seconds": (first_platform, first_plain)},
        )],
        notes=notes,
        seconds=time.monotonic() - started,
    )
