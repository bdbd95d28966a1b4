"""Global batch size and learning rate from the allocation (the user never edits them per cluster).

Rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): `batch_size` is per replica, so the
global batch grows with the replicas in sync, and the learning rate grows linearly with it. The
rate ramps linearly from the single-replica rate to the scaled one over `warmup_epochs`, which keeps
the first large-batch steps stable (the Horovod convention: no ramp with one replica). With
`scale_batch_size` off, `batch_size` is the global batch, split across replicas, and the learning
rate is used as given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from training.errors import InvalidInput


@dataclass(frozen=True)
class BatchPlan:
    replicas: int
    per_replica_batch_size: int
    global_batch_size: int
    base_learning_rate: float
    learning_rate: float  # after warm-up
    warmup_epochs: int
    rule: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def batch_plan(
    *, batch_size: int, replicas: int, learning_rate: float, scale: bool, warmup_epochs: int
) -> BatchPlan:
    if replicas < 1:
        raise InvalidInput("a strategy has at least one replica")
    if scale:
        per_replica, global_batch = batch_size, batch_size * replicas
        rate = learning_rate * replicas
        rule = (
            f"per-replica batch {batch_size} × {replicas} replicas = global batch {global_batch}; "
            f"learning rate {learning_rate:g} × {replicas} = {rate:g} (linear scaling)"
        )
    else:
        if batch_size < replicas:
            raise InvalidInput(
                f"batch_size {batch_size} is smaller than the {replicas} replicas in sync"
            )
        per_replica, global_batch, rate = batch_size // replicas, batch_size, learning_rate
        rule = (
            f"global batch {global_batch} split over {replicas} replicas (~{per_replica} each); "
            f"learning rate {rate:g} unscaled (scale_batch_size is off)"
        )
    if warmup_epochs and rate != learning_rate:
        rule += f", warm-up from {learning_rate:g} over {warmup_epochs} epochs"
    return BatchPlan(
        replicas=replicas,
        per_replica_batch_size=per_replica,
        global_batch_size=global_batch,
        base_learning_rate=learning_rate,
        learning_rate=rate,
        warmup_epochs=warmup_epochs,
        rule=rule,
    )


def learning_rate_at(*, plan: BatchPlan, step: int, steps_per_epoch: int) -> float:
    """The rate at a global optimizer step; the Keras schedule computes the same in TF ops."""
    warmup_steps = plan.warmup_epochs * steps_per_epoch
    if warmup_steps <= 0 or step >= warmup_steps:
        return plan.learning_rate
    fraction = step / warmup_steps
    return plan.base_learning_rate + (plan.learning_rate - plan.base_learning_rate) * fraction
