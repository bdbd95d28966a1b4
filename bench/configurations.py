"""Item 1: the same model and data under each distribution configuration, through the platform.

Every configuration is submitted through the REST API; the platform picks the strategy from the
resources alone. Rounds are interleaved (each round runs every configuration once) and each
figure is the median over rounds of a per-run figure:

- images/sec: the median of the run's per-epoch rates, first epoch (tracing) left out;
- time to target: training seconds until val_accuracy first reached the target (the platform's
  time_to_target_seconds), and submit → that epoch's end on the wall clock (start-up included);
- scaling efficiency: images/sec ÷ (compute replicas × the single-process images/sec).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import stats
from bench.api import PlatformClient
from bench.quiet import wait_quiet
from bench.report import BarChart, Section, Table, number
from bench.runs import TrainingRun, Workload, platform_run
from training.supervisor.warm import REFILL_DELAY_SECONDS


@dataclass(frozen=True)
class Configuration:
    label: str
    resources: dict[str, int]

    @property
    def compute_replicas(self) -> int:
        """Model copies computing gradients: in-sync replicas, or the workers under PS."""
        workers = self.resources.get("workers", 1)
        return workers * max(1, self.resources.get("gpus_per_worker", 0))


CONFIGURATIONS = (
    Configuration("CPU default", {"workers": 1, "gpus_per_worker": 0, "parameter_servers": 0}),
    Configuration("Mirrored, 2 logical devices",
                  {"workers": 1, "gpus_per_worker": 2, "parameter_servers": 0}),
    Configuration("MultiWorkerMirrored, 2 workers",
                  {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0}),
    Configuration("ParameterServer, 1 ps + 2 workers",
                  {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 1}),
)


def _submit_to_target(run: TrainingRun, target: float) -> float | None:
    reached = [e for e in run.epochs if e.val_accuracy is not None and e.val_accuracy >= target]
    if not reached or run.started_at is None:
        return None
    return reached[0].ended_at - run.started_at


def _median_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return stats.median(present) if present else None


def configurations_measure(client: PlatformClient, *, workload: Workload,
                           rounds: int) -> Section:
    started = time.monotonic()
    runs: dict[str, list[TrainingRun]] = {c.label: [] for c in CONFIGURATIONS}
    for _ in range(rounds):
        for configuration in CONFIGURATIONS:
            # The previous run's warm-process replacement starts a moment after it ended.
            time.sleep(REFILL_DELAY_SECONDS + 1.0)
            wait_quiet(timeout=30)
            runs[configuration.label].append(platform_run(
                client, label=configuration.label, resources=configuration.resources,
                workload=workload,
            ))
    single = stats.median([r.steady_images_per_sec for r in runs[CONFIGURATIONS[0].label]])
    rows, rates, efficiencies = [], [], []
    for configuration in CONFIGURATIONS:
        done = runs[configuration.label]
        rate = stats.median([r.steady_images_per_sec for r in done])
        efficiency = rate / (configuration.compute_replicas * single)
        rates.append(rate)
        efficiencies.append(efficiency)
        reached = sum(1 for r in done if r.time_to_target is not None)
        strategies = sorted({r.strategy for r in done})
        in_sync = sorted({r.replicas for r in done})
        rows.append((
            configuration.label,
            ", ".join(strategies),
            f"{configuration.compute_replicas} ({'/'.join(map(str, in_sync))} in sync)",
            number(rate, 0),
            number(_median_or_none([r.time_to_target for r in done]), 2),
            number(_median_or_none([_submit_to_target(r, workload.target_accuracy)
                                    for r in done]), 1),
            f"{reached}/{len(done)}",
            number(stats.median([r.final_val_accuracy or 0.0 for r in done]), 3),
            number(efficiency, 2),
        ))
    table = Table(
        columns=("configuration", "strategy the platform chose", "replicas", "images/sec",
                 "time to target, training s", "submit → target, wall s", "reached target",
                 "final val_accuracy", "scaling efficiency"),
        rows=rows,
    )
    labels = tuple(c.label.replace(", ", "\n") for c in CONFIGURATIONS)
    return Section(
        title="1. Configuration comparison",
        description=(
            f"Workload: {workload.describe()}. {rounds} interleaved round(s) of every "
            "configuration, all submitted through the REST API to one worker node declaring 2 "
            "emulated GPU slots and 3 CPU slots; medians over rounds of each run's median "
            "steady-epoch rate (first epoch left out). Scaling efficiency = images/sec ÷ "
            "(replicas × CPU-default images/sec); under ParameterServerStrategy the replicas "
            "are its 2 workers (its num_replicas_in_sync is 1 on CPU, so the global batch is "
            "not scaled)."
        ),
        tables=[table],
        charts=[
            BarChart("configurations_images_per_sec.png", "Training throughput by configuration",
                     "images/sec (median of steady epochs)", labels, {"images/sec": tuple(rates)}),
            BarChart("configurations_scaling_efficiency.png", "Scaling efficiency",
                     "images/sec ÷ (replicas × single process)", labels,
                     {"efficiency": tuple(efficiencies)}),
        ],
        notes=[
            "Both emulated GPU slots and every worker process share the same 2 CPU cores, so "
            "more replicas add synchronisation work without adding compute: efficiency well "
            "below 1 is what this machine can show, not a platform limit.",
            "The worker node starts a replacement warm trial process "
            f"{REFILL_DELAY_SECONDS:.0f} s after the task it served has ended; runs are "
            "started once the machine is quiet again, so that import overlaps no measurement.",
        ],
        seconds=time.monotonic() - started,
    )
