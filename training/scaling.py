"""Global batch size and learning rate from the allocation (the user never edits them per cluster).

Rule (Goyal et al. 2017, "Accurate, Large Minibatch SGD"): `batch_size` is per replica, so the
global batch grows with the replicas in sync, and the learning rate grows linearly with it. The
rate ramps linearly from the single-replica rate to the scaled one over `warmup_epochs`, which keeps
the first large-batch steps stable (the Horovod convention: no ramp with one replica). With
`scale_batch_size` off, `batch_size` is the global batch, split across replicas, and the learning
rate is used as given.

Elastic experiments (`replicas_target`, the largest size they run at) define the global batch and
rate for that size. Below it, each replica takes `replicas_target // replicas` micro-batches of
the target's per-replica size per optimizer step and averages their gradients (trial/
accumulation.py): the global batch, the rate and the warm-up are the same at every size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from training.errors import InvalidInput


@dataclass(frozen=True)
class BatchPlan:
    replicas: int
    per_replica_batch_size: int  # one forward pass of one replica: a micro-batch when accumulating
    global_batch_size: int
    base_learning_rate: float
    learning_rate: float  # after warm-up
    warmup_epochs: int
    rule: str
    replicas_target: int  # the replicas the global batch is defined for (= replicas if not elastic)
    accumulation_steps: int = 1  # micro-batches per replica and optimizer step

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def accumulation_steps_for(*, replicas: int, replicas_target: int) -> int:
    """Micro-batches per optimizer step that make `replicas` do the work of `replicas_target`."""
    if replicas_target <= 0 or replicas_target == replicas:
        return 1
    if replicas_target < replicas:
        raise InvalidInput(
            f"{replicas} replicas were granted, more than the {replicas_target} the experiment's "
            "global batch is defined for"
        )
    if replicas_target % replicas:
        raise InvalidInput(
            f"{replicas} replicas cannot keep the global batch of {replicas_target}: gradient "
            f"accumulation needs the replicas to divide {replicas_target}"
        )
    return replicas_target // replicas


def batch_plan(
    *, batch_size: int, replicas: int, learning_rate: float, scale: bool, warmup_epochs: int,
    replicas_target: int = 0,
) -> BatchPlan:
    if replicas < 1:
        raise InvalidInput("a strategy has at least one replica")
    steps = accumulation_steps_for(replicas=replicas, replicas_target=replicas_target)
    # Everything below is sized for the target; the actual replicas only split it.
    target = replicas * steps
    shape = f"{replicas} replicas"
    if steps > 1:
        shape += f" × {steps} accumulation steps"
    if scale:
        per_replica, global_batch = batch_size, batch_size * target
        rate = learning_rate * target
        rule = (
            f"per-replica batch {batch_size} × {shape} = global batch {global_batch}; "
            f"learning rate {learning_rate:g} × {target} = {rate:g} (linear scaling)"
        )
    else:
        if batch_size < target:
            raise InvalidInput(
                f"batch_size {batch_size} is smaller than the {target} replicas in sync"
            )
        if steps > 1 and batch_size % target:
            # Micro-batches must match the full size's replica batches exactly.
            raise InvalidInput(
                f"batch_size {batch_size} does not split evenly over the {target} replicas the "
                "elastic experiment's global batch is defined for"
            )
        per_replica, global_batch, rate = batch_size // target, batch_size, learning_rate
        rule = (
            f"global batch {global_batch} split over {shape} (~{per_replica} each); "
            f"learning rate {rate:g} unscaled (scale_batch_size is off)"
        )
    if steps > 1:
        rule += f" (elastic: sized for {target} replicas)"
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
        replicas_target=target,
        accumulation_steps=steps,
    )


def learning_rate_at(*, plan: BatchPlan, step: int, steps_per_epoch: int) -> float:
    """The rate at a global optimizer step; the Keras schedule computes the same in TF ops."""
    warmup_steps = plan.warmup_epochs * steps_per_epoch
    if warmup_steps <= 0 or step >= warmup_steps:
        return plan.learning_rate
    fraction = step / warmup_steps
    return plan.base_learning_rate + (plan.learning_rate - plan.base_learning_rate) * fraction
