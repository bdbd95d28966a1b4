"""Submitting experiments: new, restarted from a finished one, and cancelled."""

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.files.storage import default_storage
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models.fields.files import FieldFile
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.storage import storage_quota_check
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.elastic import Size
from tfplatform.cluster.placement import gpu_fraction_of
from tfplatform.core.errors import InvalidInput, InvalidTransition
from tfplatform.datasets.models import Dataset
from tfplatform.experiments import validation
from tfplatform.experiments.models import Environment, EnvironmentRevision, Experiment, Trial
from tfplatform.experiments.revisions import environment_revision_ensure
from tfplatform.experiments.selectors.environments import environment_default
from tfplatform.experiments.services import admission
from tfplatform.experiments.services.transitions import (
    TERMINAL_STATES,
    State,
    experiment_transition,
)
from tfplatform.experiments.services.trials import (
    STOP_CANCELED,
    TRIAL_ACTIVE_STATES,
    trial_request_stop,
)
from training.spark.target import QUERY_HYPERPARAMETER

# The folders Experiment's file fields store uploads in (their upload_to).
UPLOAD_FOLDERS = ("models", "datasets")
# A submission stores its files in seconds; an unnamed file older than this is a leftover.
LEFTOVER_GRACE_SECONDS = 600.0


@dataclass(frozen=True, kw_only=True)
class ExperimentRequest:
    name: str
    model: str
    dataset: str
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    workers: int = 1
    gpus_per_worker: int = 0
    parameter_servers: int = 0
    # Elastic (cluster/elastic.py): the smallest size, in workers or in GPUs per worker (the
    # fields above are then the largest); None: a fixed size.
    min_workers: int | None = None
    min_gpus_per_worker: int | None = None
    # Only nodes of this pool and with GPUs of this type (cluster/pools.py); empty: any.
    pool: str = ""
    gpu_type: str = ""
    # Instead of whole GPUs (gpus_per_worker 0): each worker a share of one GPU, as a fraction
    # or an amount of its memory (cluster/placement.py shares).
    gpu_fraction: float | None = None
    gpu_memory_mb: int = 0
    priority: int = 0
    # Empty metric: val_accuracy; empty mode: from the metric's name (training/target.py).
    target_metric: str = ""
    target_mode: str = ""
    target_value: float | None = None
    max_restarts: int = 3
    environment: Environment | None = None
    model_file: UploadedFile | None = None
    dataset_file: UploadedFile | None = None
    # A reproduction's pins (services/reproduction.py): this dataset version and environment
    # revision rather than the newest, and the experiment it reproduces.
    dataset_pin: Dataset | None = None
    environment_revision: EnvironmentRevision | None = None
    reproduces: Experiment | None = None


def experiment_create(*, owner: User, request: ExperimentRequest) -> Experiment:
    validation.priority_check(user=owner, priority=request.priority)
    validation.model_check(model=request.model, upload=request.model_file)
    hyperparameters = validation.hyperparameters_clean(
        model=request.model, hyperparameters=request.hyperparameters
    )
    validation.resources_check(
        workers=request.workers,
        gpus_per_worker=request.gpus_per_worker,
        parameter_servers=request.parameter_servers,
    )
    gpu_milli = admission.gpu_share_milli(fraction=request.gpu_fraction,
                                          memory_mb=request.gpu_memory_mb,
                                          whole_gpus=request.gpus_per_worker)
    workers_min, gpus_min = admission.elastic_range_check(
        workers=request.workers, gpus_per_worker=request.gpus_per_worker,
        min_workers=request.min_workers, min_gpus_per_worker=request.min_gpus_per_worker,
        parameter_servers=request.parameter_servers,
        gpu_shared=bool(gpu_milli or request.gpu_memory_mb))
    if workers_min or gpus_min:
        validation.elastic_batch_check(
            hyperparameters=hyperparameters,
            replicas=Size(workers_min or request.workers, gpus_min or request.gpus_per_worker
                          ).replicas,
            replicas_target=Size(request.workers, request.gpus_per_worker).replicas)
    admission.spark_request_check(
        pool=request.pool, elastic=bool(workers_min or gpus_min),
        gpu_shared=bool(gpu_milli or request.gpu_memory_mb),
        environment=request.environment is not None,
        spark_query=hyperparameters.get(QUERY_HYPERPARAMETER),
        parameter_servers=request.parameter_servers)
    # An elastic request need only fit at its smallest size: it grows where it can.
    admission.request_size_check(
        owner=owner, workers=workers_min or request.workers,
        gpus_per_worker=gpus_min or request.gpus_per_worker,
        parameter_servers=request.parameter_servers, pool=request.pool,
        gpu_type=request.gpu_type, gpu_milli=gpu_milli, gpu_memory_mb=request.gpu_memory_mb,
    )
    # A worker with a share of a GPU sees one GPU, as one with a whole one does.
    gpus_seen = request.gpus_per_worker or int(bool(gpu_milli or request.gpu_memory_mb))
    validation.precision_check(
        hyperparameters=hyperparameters,
        workers=request.workers,
        gpus_per_worker=gpus_seen,
        parameter_servers=request.parameter_servers,
    )
    validation.board_check(hyperparameters=hyperparameters,
                           parameter_servers=request.parameter_servers)
    registered = validation.dataset_check(
        dataset=request.dataset, upload=request.dataset_file, hyperparameters=hyperparameters,
        owner=owner, parameter_servers=request.parameter_servers, pinned=request.dataset_pin,
    )
    target = validation.target_check(
        metric=request.target_metric, mode=request.target_mode, value=request.target_value
    )
    environment = request.environment or environment_default(gpu=gpus_seen > 0)
    if environment is not None and gpus_seen > 0 and not environment.gpu_capable:
        raise InvalidInput(
            f"Environment '{environment.name}' has no GPU support; choose a GPU-capable one.",
            field="environment",
        )
    revision = request.environment_revision or (
        environment_revision_ensure(environment=environment) if environment is not None else None)
    with transaction.atomic():
        admission.owner_lock(owner=owner)
        admission.queued_limit_check(owner=owner)
        experiment = Experiment.objects.create(
            owner=owner,
            team_id=owner.team_id,
            name=request.name,
            environment=environment,
            environment_revision=revision,
            model=request.model,
            # A registered dataset by its name; the version it read is pinned beside it.
            dataset=registered.name if registered is not None else request.dataset,
            dataset_version=registered,
            dataset_version_number=registered.version if registered is not None else None,
            dataset_fingerprint=registered.fingerprint if registered is not None else "",
            reproduced_from=request.reproduces,
            hyperparameters=hyperparameters,
            workers=request.workers,
            gpus_per_worker=request.gpus_per_worker,
            parameter_servers=request.parameter_servers,
            workers_min=workers_min,
            gpus_per_worker_min=gpus_min,
            pool=request.pool,
            gpu_type=request.gpu_type,
            gpu_milli=gpu_milli,
            gpu_memory_mb=request.gpu_memory_mb,
            priority=request.priority,
            target_metric=target.metric,
            target_mode=target.mode,
            target_value=target.value,
            max_restarts=request.max_restarts,
            pending_reason="Waiting for the scheduler.",
        )
        uploads = [f for f in (request.model_file, request.dataset_file) if f is not None]
        experiment.upload_bytes = sum(f.size or 0 for f in uploads)
        storage_quota_check(user=owner, adding=experiment.upload_bytes)
        if request.model_file is not None:
            experiment.model_file.save(f"{experiment.pk}-model.py", request.model_file, save=False)
        if request.dataset_file is not None:
            name = request.dataset_file.name or "dataset"
            experiment.dataset_file.save(
                f"{experiment.pk}-{name}", request.dataset_file, save=False
            )
        experiment.save()
        scheduler_wake_on_commit()
    return experiment


def experiment_cancel(*, experiment: Experiment, actor: Actor = None) -> Experiment:
    """Cancel now if nothing runs yet; otherwise ask the running trial to stop. Stopped by
    someone other than its owner (staff, a teammate), it is an audit row: `actor` is who."""
    with transaction.atomic():
        # Its live trial before the experiment, in the order a node recording a trial's end
        # (execution.trial_outcome_record) and a scheduling pass take them: the other order
        # deadlocked with a trial ending at the moment of the cancel. A trial that ends while
        # this waits is no longer live once its lock is ours.
        running_trial = (Trial.objects.select_for_update()
                         .filter(experiment_id=experiment.pk, state__in=TRIAL_ACTIVE_STATES)
                         .order_by("pk").first())
        current = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if current.state in TERMINAL_STATES:
            raise InvalidTransition(f"The experiment is already {current.state}.")
        before: dict[str, Any] = {"state": current.state}
        after: dict[str, Any]
        if running_trial is None:
            experiment_transition(experiment=current, to=State.CANCELED)
            after = {"state": State.CANCELED}
        else:
            trial_request_stop(trial=running_trial, reason=STOP_CANCELED)
            after = {"state": current.state, "stop_requested": STOP_CANCELED}
        if actor is not None and actor.is_authenticated and actor.pk != current.owner_id:
            audit_record(actor=actor, action=AuditAction.EXPERIMENT_CANCEL, target=current,
                         before=before, after=after)
    experiment.refresh_from_db()
    return experiment


def experiment_restart(*, user: User, experiment: Experiment) -> Experiment:
    """Run a finished experiment again as a new one: same configuration, same uploads; a
    registered dataset's newest version, the environment as it is now.

    It goes through experiment_create, so a configuration that has since become invalid (an
    upload gone, an environment without GPUs) is refused like a new submission would be.
    """
    with ExitStack() as stack:
        return experiment_create(
            owner=user, request=experiment_request_of(experiment=experiment, stack=stack))


def experiment_request_of(*, experiment: Experiment, stack: ExitStack, action: str = "restarted",
                          **pins: Any) -> ExperimentRequest:
    """A finished experiment's configuration as a new request, its uploads reopened (closed
    with `stack`); `pins`: ExperimentRequest's fields set otherwise (a reproduction's)."""
    experiment_finished_check(experiment=experiment, action=action)
    return ExperimentRequest(**{
        "name": experiment.name,
        "model": experiment.model,
        "dataset": experiment.dataset,
        "hyperparameters": dict(experiment.hyperparameters),
        "workers": experiment.workers,
        "gpus_per_worker": experiment.gpus_per_worker,
        "parameter_servers": experiment.parameter_servers,
        "min_workers": experiment.workers_min or None,
        "min_gpus_per_worker": experiment.gpus_per_worker_min or None,
        "pool": experiment.pool,
        "gpu_type": experiment.gpu_type,
        "gpu_fraction": gpu_fraction_of(milli=experiment.gpu_milli),
        "gpu_memory_mb": experiment.gpu_memory_mb,
        "priority": experiment.priority,
        "target_metric": experiment.target_metric,
        "target_mode": experiment.target_mode,
        "target_value": experiment.target_value,
        "max_restarts": experiment.max_restarts,
        "environment": experiment.environment,
        "model_file": _upload_reopen(stored=experiment.model_file, field="model_file",
                                     stack=stack),
        "dataset_file": _upload_reopen(stored=experiment.dataset_file, field="dataset_file",
                                       stack=stack, prefix=f"{experiment.pk}-"),
        **pins,
    })


def experiment_finished_check(*, experiment: Experiment, action: str) -> None:
    if experiment.state not in TERMINAL_STATES:
        raise InvalidInput(
            f"Only a finished experiment can be {action}; this one is {experiment.state}."
        )


def _upload_reopen(
    *, stored: FieldFile, field: str, stack: ExitStack, prefix: str = ""
) -> UploadedFile | None:
    """A stored upload offered again as an upload, under the name the user first gave it."""
    if not stored or not stored.name:
        return None
    try:
        handle = stack.enter_context(stored.storage.open(stored.name, "rb"))
        size = stored.storage.size(stored.name)
    except OSError as error:
        raise InvalidInput(
            f"The original {field} is no longer stored; submit the experiment again.", field=field
        ) from error
    name = Path(stored.name).name.removeprefix(prefix)
    return UploadedFile(file=handle, name=name, size=size)


def uploads_leftovers_remove(*, older_than: float = LEFTOVER_GRACE_SECONDS) -> list[str]:
    """Stored uploads no experiment names: the web process saved the file and was killed before
    its experiment was committed (or the experiment is gone). Younger files may belong to a
    submission still under way, so only those older than `older_than` seconds go."""
    referenced = {
        name
        for pair in Experiment.objects.values_list("model_file", "dataset_file")
        for name in pair
        if name
    }
    cutoff = timezone.now() - timedelta(seconds=older_than)
    removed = []
    for folder in UPLOAD_FOLDERS:
        for name in _stored_files(folder=folder):
            if name in referenced:
                continue
            try:
                modified = default_storage.get_modified_time(name)
            except FileNotFoundError:
                continue  # another scheduler's sweep removed it since the listing
            if modified < cutoff:
                default_storage.delete(name)
                removed.append(name)
    return removed


def _stored_files(*, folder: str) -> Iterator[str]:
    if not default_storage.exists(folder):
        return
    folders, files = default_storage.listdir(folder)
    yield from (f"{folder}/{name}" for name in files)
    for child in folders:
        yield from _stored_files(folder=f"{folder}/{child}")
