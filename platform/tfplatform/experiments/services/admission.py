"""What a submission must pass before it may queue: a size that can ever run, and the user's
limits on what waits and runs at once (accounts/limits.py).

A request over the owner's GPU or CPU-slot quota, or larger than the registered nodes, would
wait forever; it is refused at once with a field error instead. The per-user limits keep one
account from filling the queue or the cluster (the scheduler applies the running limit).
"""

from dataclasses import dataclass

from tfplatform.accounts.limits import NO_LIMIT, limits_of
from tfplatform.accounts.models import User
from tfplatform.cluster.elastic import elastic_range_error
from tfplatform.cluster.placement import WHOLE_MILLI, gpus_text, needs_held, task_needs
from tfplatform.cluster.pools import pool_check, pool_dedicated
from tfplatform.cluster.selectors import cluster_misfit
from tfplatform.core.errors import InvalidInput, LimitReached
from tfplatform.experiments.models import Experiment

State = Experiment.State
SESSION_LIVE_STATES = (State.QUEUED, State.SCHEDULED, State.RUNNING)


@dataclass(frozen=True, kw_only=True)
class SizeFields:
    """The form or API fields a size error is reported on."""

    gpus: str = "resources"
    cpu_slots: str = "resources"
    pool: str = "resources"
    gpu_type: str = "resources"


def gpu_share_milli(*, fraction: float | None, memory_mb: int, whole_gpus: int,
                    field: str = "resources") -> int:
    """A share of one GPU as thousandths (0: none, or asked for as memory), checked: a fraction
    strictly between 0 and 1, not with whole GPUs, not with an amount of memory too."""
    if fraction is None or fraction == 0:
        if memory_mb and whole_gpus:
            raise InvalidInput("Ask for whole GPUs or for an amount of one GPU's memory, not "
                               "both.", field=field)
        return 0
    if not 0 < fraction < 1:
        raise InvalidInput(f"gpu_fraction must be above 0 and below 1 (a share of one GPU; "
                           f"{fraction:g} is not): ask for whole GPUs as GPUs.", field=field)
    if whole_gpus or memory_mb:
        raise InvalidInput("A GPU fraction is a share of one GPU: ask for it alone, without "
                           "whole GPUs or an amount of memory.", field=field)
    milli = round(fraction * WHOLE_MILLI)
    if not 0 < milli < WHOLE_MILLI:
        raise InvalidInput("gpu_fraction is counted in thousandths of a GPU: between 0.001 and "
                           "0.999.", field=field)
    return milli


def elastic_range_check(*, workers: int, gpus_per_worker: int, min_workers: int | None,
                        min_gpus_per_worker: int | None, parameter_servers: int,
                        gpu_shared: bool) -> tuple[int, int]:
    """The smallest workers and GPUs per worker an elastic request may run at, as stored
    (0: that dimension is fixed; a minimum equal to the size is no range)."""
    error = elastic_range_error(
        workers=workers, gpus_per_worker=gpus_per_worker, workers_min=min_workers,
        gpus_per_worker_min=min_gpus_per_worker, parameter_servers=parameter_servers,
        gpu_shared=gpu_shared)
    if error is not None:
        raise InvalidInput(error, field="resources")
    return ((min_workers or 0) if (min_workers or 0) < workers else 0,
            (min_gpus_per_worker or 0) if (min_gpus_per_worker or 0) < gpus_per_worker else 0)


SPARK_QUERY_MAX = 20_000


def spark_request_check(*, pool: str, workspace: bool = False, elastic: bool = False,
                        gpu_shared: bool = False, environment: bool = False,
                        spark_query: object = None, parameter_servers: int = 0) -> None:
    """A Spark cluster's pool runs training trials as Spark applications, in the executors'
    own Python: no workspace, share of a GPU, elastic range or environment of the platform's.
    A `spark_query` (the trial's input read from the cluster's tables) needs such a pool and
    its workers alone."""
    if spark_query is not None:
        if not isinstance(spark_query, str) or not spark_query.strip() or \
                len(spark_query) > SPARK_QUERY_MAX:
            raise InvalidInput(f"spark_query is a Spark SQL query of at most {SPARK_QUERY_MAX} "
                               "characters.", field="hyperparameters")
        if not pool_dedicated(pool=pool):
            raise InvalidInput("spark_query reads a Spark cluster's tables: ask for its pool "
                               "(resources.pool: spark-NAME).", field="hyperparameters")
        if parameter_servers:
            raise InvalidInput("spark_query splits its rows among the workers: not with "
                               "parameter servers.", field="hyperparameters")
    if not pool_dedicated(pool=pool):
        return
    refused = [what for what, asked in (
        ("a workspace", workspace), ("a share of a GPU", gpu_shared),
        ("an elastic range", elastic), ("an environment (its executors' Python runs the "
                                        "trial)", environment)) if asked]
    if refused:
        raise InvalidInput(f"Pool '{pool}' is a Spark cluster's; it does not take "
                           f"{' or '.join(refused)}.", field="pool")


def request_size_check(
    *, owner: User, workers: int, gpus_per_worker: int, parameter_servers: int,
    cpu_slots_per_worker: int = 1, pool: str = "", gpu_type: str = "", gpu_milli: int = 0,
    gpu_memory_mb: int = 0, fields: SizeFields = SizeFields(),
) -> None:
    """Refuses a gang that could never start: over the owner's quotas, or too large for the
    registered nodes (of its pool and GPU type, when it asks for them)."""
    if pool:
        pool_check(pool=pool, field=fields.pool)
    if gpu_type and not (gpus_per_worker or gpu_milli or gpu_memory_mb):
        raise InvalidInput("A GPU type is asked for with GPUs; this asks for none.",
                           field=fields.gpu_type)
    needs = task_needs(workers=workers, gpus_per_worker=gpus_per_worker,
                       parameter_servers=parameter_servers,
                       cpu_slots_per_worker=cpu_slots_per_worker, gpu_milli=gpu_milli,
                       gpu_memory_mb=gpu_memory_mb)
    gpus, cpu_slots = needs_held(needs=needs)
    limits = limits_of(user=owner)
    # With borrowing, the limit is what the team may ever hold.
    gpu_cap, cpu_cap = limits.gpu_limit, limits.cpu_slot_limit
    cap = "quota" if gpu_cap == limits.gpu_quota else "limit"
    if gpus > gpu_cap * WHOLE_MILLI or (gpu_memory_mb and not gpu_cap):
        raise InvalidInput(
            f"Needs {gpus_text(milli=gpus) if gpus else 'a share of a'} GPUs; "
            f"{limits.quota_owner} {cap} is {gpu_cap}, so it could never start. Ask for fewer, "
            "or ask an operator for a larger quota.", field=fields.gpus)
    if cpu_slots > cpu_cap:
        cap = "quota" if cpu_cap == limits.cpu_slot_quota else "limit"
        raise InvalidInput(
            f"Needs {cpu_slots} CPU slots; {limits.quota_owner} {cap} is {cpu_cap}, so it "
            "could never start.", field=fields.cpu_slots)
    misfit = cluster_misfit(needs=needs, pool=pool, gpu_type=gpu_type)
    if misfit is not None:
        field = {"pool": fields.pool, "gpu_type": fields.gpu_type}.get(
            misfit.on, fields.gpus if gpus or gpu_memory_mb else fields.cpu_slots)
        raise InvalidInput(f"Never fits the cluster: {misfit.text}.", field=field)


def queued_limit_check(*, owner: User) -> None:
    """Call inside the submission's transaction, after `owner_lock`."""
    limit = limits_of(user=owner).max_queued
    if owner.is_staff or limit == NO_LIMIT:
        return
    queued = Experiment.objects.filter(
        owner=owner, kind=Experiment.Kind.TRAINING, state=State.QUEUED).count()
    if queued >= limit:
        raise LimitReached(
            f"You have {queued} experiments queued, your limit; submit more once some have "
            "started, or cancel some.")


def workspace_limit_check(*, owner: User, replacing: int | None) -> None:
    """Call inside the start's transaction, after `owner_lock`. `replacing`: the session a
    restart replaces, which counts no more even while it is still stopping."""
    limit = limits_of(user=owner).max_workspaces
    if owner.is_staff or limit == NO_LIMIT:
        return
    sessions = Experiment.objects.filter(
        owner=owner, kind=Experiment.Kind.WORKSPACE, state__in=SESSION_LIVE_STATES)
    if replacing is not None:
        sessions = sessions.exclude(pk=replacing)
    live = sessions.count()
    if live >= limit:
        raise LimitReached(
            f"You have {live} workspace sessions queued or running, your limit; stop one "
            "first.")


def owner_lock(*, owner: User) -> None:
    """Two submissions of one user at once are counted one after the other. (SQLite needs
    nothing: its write transactions already run one at a time.)"""
    User.objects.select_for_update().filter(pk=owner.pk).exists()
