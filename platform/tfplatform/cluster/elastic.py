"""Sizes of an elastic experiment: plain values, no database.

An elastic experiment gives a range of workers, or of GPUs per worker (not both), and its
global batch is defined for the largest size. A smaller size keeps that batch with gradient
accumulation (training/scaling.py), so its replicas must divide the largest size's: with 4 at
most, it runs at 4, 2 or 1 replicas, never 3. The scheduler starts it at the largest size that
fits, shrinks it (checkpoint, then restart smaller) instead of preempting it whole, and grows it
when devices are idle and nothing eligible waits.

    elastic_sizes(workers=1, gpus_per_worker=4, workers_min=0, gpus_per_worker_min=1)
    # [Size(1, 4), Size(1, 2), Size(1, 1)]
"""

from dataclasses import dataclass

RESIZED = "resized"  # a trial's stop reason: it restarts at another size


@dataclass(frozen=True, order=True)
class Size:
    workers: int
    gpus_per_worker: int

    @property
    def replicas(self) -> int:
        return self.workers * max(self.gpus_per_worker, 1)

    @property
    def text(self) -> str:
        if self.workers == 1:
            return f"{self.gpus_per_worker} GPU" if self.gpus_per_worker else "1 worker"
        gpus = f" × {self.gpus_per_worker} GPU" if self.gpus_per_worker else ""
        return f"{self.workers} workers{gpus}"


@dataclass(frozen=True)
class ElasticRun:
    """A live elastic trial, as a scheduling pass sees it."""

    experiment_id: int
    owner_id: int
    size: Size
    sizes: tuple[Size, ...]  # the largest first
    pool: str = ""
    gpu_type: str = ""

    @property
    def shrinkable(self) -> bool:
        return self.size.replicas > self.sizes[-1].replicas

    @property
    def larger(self) -> tuple[Size, ...]:
        return tuple(s for s in self.sizes if s.replicas > self.size.replicas)


def elastic_sizes(*, workers: int, gpus_per_worker: int, workers_min: int,
                  gpus_per_worker_min: int) -> list[Size]:
    """The sizes it may run at, the largest first; one for a fixed-size experiment."""
    if workers_min:
        return [Size(n, gpus_per_worker) for n in range(workers, workers_min - 1, -1)
                if workers % n == 0]
    if gpus_per_worker_min:
        return [Size(workers, n) for n in range(gpus_per_worker, gpus_per_worker_min - 1, -1)
                if gpus_per_worker % n == 0]
    return [Size(workers, gpus_per_worker)]


def elastic_range_error(*, workers: int, gpus_per_worker: int, workers_min: int | None,
                        gpus_per_worker_min: int | None, parameter_servers: int,
                        gpu_shared: bool) -> str | None:
    """Why the range cannot be run; None when it can (or there is none)."""
    if workers_min is not None and gpus_per_worker_min is not None:
        return "Give a range of workers or of GPUs per worker, not both."
    if workers_min is None and gpus_per_worker_min is None:
        return None
    if parameter_servers:
        return "Parameter-server training cannot be elastic."
    if gpu_shared:
        return "A share of a GPU cannot be elastic."
    if workers_min is not None:
        name, low, high = "min_workers", workers_min, workers
    else:
        assert gpus_per_worker_min is not None
        name, low, high = "min_gpus_per_worker", gpus_per_worker_min, gpus_per_worker
    if not 1 <= low <= high:
        return f"{name} must be between 1 and the largest size, {high}."
    if low == high:
        return None
    sizes = [n for n in range(high - 1, low - 1, -1) if high % n == 0]
    if not sizes:
        return (f"No size from {low} to {high - 1} divides {high}: a smaller size keeps the "
                "global batch with gradient accumulation, so its replicas must divide the "
                "largest size's.")
    return None
