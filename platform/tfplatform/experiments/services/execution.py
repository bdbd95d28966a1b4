"""Runs one trial on this node: builds the training spec, supervises it, records the outcome."""

import logging
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import QuerySet

from tfplatform.cluster.discovery import work_disk_free_bytes
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.elastic import RESIZED, Size
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.placement import WHOLE_MILLI
from tfplatform.cluster.services import (
    allocations_claim_part,
    allocations_release,
    node_heartbeat,
    node_trials_held_mid_run,
    nodes_mark_lost,
)
from tfplatform.cluster.spark import spark_target_for
from tfplatform.core.database import (
    DATABASE_ERRORS,
    database_connection_reset,
    database_wait,
)
from tfplatform.core.errors import InvalidInput
from tfplatform.datasets.locations import dataset_mount_roots
from tfplatform.datasets.selectors import dataset_version_readable
from tfplatform.datasets.services import dataset_source_for_trials
from tfplatform.experiments.environments import EnvironmentBuildFailed, environment_build_ensure
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.node_paths import node_paths_hide
from tfplatform.experiments.services.gangs import trial_cluster_plan
from tfplatform.experiments.services.lineage import trial_lineage_record
from tfplatform.experiments.services.recording import TrialEventRecorder
from tfplatform.experiments.services.transitions import experiment_start, experiment_transition
from tfplatform.experiments.services.trials import (
    RESUMED_STOPS,
    STOP_CANCELED,
    STOP_ORPHANED,
    TRIAL_ACTIVE_STATES,
    trial_finish,
    trial_request_stop,
    trial_set_placement,
    trial_start,
)
from tfplatform.experiments.sessions import (
    SessionGrant,
    session_activity_record,
    session_begin,
    session_end,
    session_hooks_for,
)
from tfplatform.experiments.validation import registered_source
from training.catalog import BUILTIN_DATASETS, DIAGNOSTIC_JOBS
from training.isolation.container_settings import RUNTIME_IMAGE, ContainerSettings
from training.isolation.runtime import CONTAINER_RUNTIMES, Runtime, TaskPython
from training.isolation.runtime_factory import runtime_for
from training.spark.supervise import spark_trial_supervise
from training.spec import Resources, TrialOutcome, TrialSpec
from training.supervisor.supervise import trial_supervise
from training.tf_config import LOCALHOST
from training.workspace.session import JupyterActivity

logger = logging.getLogger(__name__)
State = Experiment.State
STOP_GRACE_SECONDS = 30.0


def experiment_work_dir(*, experiment_id: int) -> Path:
    # Shared by every trial of the experiment, so a restart finds the last checkpoint.
    return Path(settings.PLATFORM.work_dir) / f"experiment-{experiment_id}"


def experiment_run_dir(*, experiment_id: int) -> Path:
    # The supervisor's files of each attempt; never shown to the trial (see supervisor.py).
    return Path(settings.PLATFORM.run_dir) / f"experiment-{experiment_id}"


ENGINE_URLS = {"podman": "unix:///run/podman/podman.sock", "docker": "unix:///var/run/docker.sock"}


def node_runtime(*, node: Node | None = None) -> Runtime:
    name = settings.PLATFORM.trial_runtime
    limit, subnet = settings.PLATFORM.landlock_abi, settings.PLATFORM.gang_subnet
    if name not in CONTAINER_RUNTIMES:
        return runtime_for(name=name, landlock_limit=limit, gang_subnet=subnet,
                           fork_server=settings.PLATFORM.task_fork_server,
                           fork_server_socket=settings.PLATFORM.task_fork_server_socket)
    return runtime_for(name=name, containers=container_settings(node=node), landlock_limit=limit,
                       gang_subnet=subnet)


def container_settings(*, node: Node | None) -> ContainerSettings:
    """The engine and a task container's limits, per device slot the task holds: its share of
    the node's memory (a hard limit) and of its cores (a weight; a quota only if configured)."""
    config = settings.PLATFORM
    slots = max(1, node.devices.count()) if node is not None else 1
    memory = config.container_memory_mb * 2**20 or (
        node.memory_bytes // slots if node is not None and node.memory_bytes else 0
    )
    return ContainerSettings(
        engine_url=config.container_engine_url or ENGINE_URLS[config.trial_runtime],
        node=node.hostname if node is not None else config.node_name,
        node_image=config.container_image or RUNTIME_IMAGE,
        oci_runtime=config.container_oci_runtime,
        memory_bytes=memory,
        pids=config.container_pids,
        cpus=config.container_cpus,
        gang_network=config.container_gang_network,
        workspace_network=config.container_workspace_network,
    )


def trial_spec_build(*, trial: Trial, grant: SessionGrant | None = None) -> TrialSpec:
    experiment = trial.experiment
    gpus = trial.allocations.filter(device__kind=Device.Kind.GPU, task_type="worker")
    gpu_ids = tuple(gpus.order_by("task_index", "device__index")
                    .values_list("device__index", flat=True))
    hyperparameters = dict(experiment.hyperparameters)
    label_column = str(hyperparameters.pop("label_column", ""))
    largest = Size(experiment.workers, experiment.gpus_per_worker)
    size = trial.size
    return TrialSpec(
        trial_id=str(trial.pk),
        model=experiment.model_file.path if experiment.model_file else experiment.model,
        dataset=experiment.dataset_file.path if experiment.dataset_file else experiment.dataset,
        # A workspace works in its owner's home volume, which outlives the session.
        work_dir=grant.home if grant else str(experiment_work_dir(experiment_id=experiment.pk)),
        datasets_dir=str(settings.PLATFORM.datasets_dir),
        label_column=label_column,
        dataset_source=_dataset_source(experiment=experiment),
        dataset_roots=dataset_mount_roots(),
        hyperparameters=hyperparameters,
        resources=Resources(
            workers=size.workers,
            # A worker with a share of a GPU sees that one GPU.
            gpus_per_worker=1 if experiment.gpu_shared else size.gpus_per_worker,
            # An elastic trial below its largest size keeps the largest's global batch.
            replicas_target=largest.replicas if experiment.elastic else 0,
            parameter_servers=experiment.parameter_servers,
            gpu_ids=gpu_ids,
            cpu_slots_per_worker=experiment.cpu_slots_per_worker,
            gpus_physical=gpus.filter(device__emulated=False).exists(),
            **_gpu_share(experiment=experiment, gpus=gpus),
        ),
        target_metric=experiment.target_metric,
        target_mode=experiment.target_mode,
        target_value=experiment.target_value,
        workspace={} if grant is None else {
            "jupyter_token": grant.jupyter_token, "socket": grant.socket,
            "api_token": grant.api_token, "api_url": settings.PLATFORM.workspace_api_url,
            "base_url": grant.base_url,
        },
    )


def _gpu_share(*, experiment: Experiment, gpus: QuerySet[Allocation]) -> dict[str, Any]:
    """A share's limits for its tasks: TensorFlow's memory limit on the GPU (the smallest of the
    workers' shares, which TF applies per process; none where the GPU's memory is unknown, as
    on an emulated slot) and whether the node's MPS bounds it too."""
    if not experiment.gpu_shared:
        return {}
    held = list(gpus.values_list("share_milli", "device__memory_bytes"))
    if experiment.gpu_memory_mb:
        limit = experiment.gpu_memory_mb
    elif held and all(memory for _, memory in held):
        limit = min(share * memory // WHOLE_MILLI for share, memory in held) // 2**20
    else:
        limit = 0
    return {"gpu_share_milli": min((share for share, _ in held), default=0),
            "gpu_memory_limit_mb": limit, "gpu_mps": settings.PLATFORM.gpu_mps}


def _dataset_source(*, experiment: Experiment) -> dict[str, Any]:
    """A registered dataset: the version the experiment pinned, its folders checked again when
    the trial starts; a version deleted since submission fails the trial with the reason."""
    if experiment.dataset_file or not experiment.dataset or experiment.model in DIAGNOSTIC_JOBS:
        return {}  # an upload, or a job that reads no dataset (pi)
    if experiment.dataset_version_number is not None:
        version = dataset_version_readable(user=experiment.owner,
                                           dataset_id=experiment.dataset_version_id) \
            if experiment.dataset_version_id is not None else None
        if version is None:
            raise InvalidInput(f"Dataset '{experiment.dataset}' version "
                               f"{experiment.dataset_version_number} is no longer registered.")
        return dataset_source_for_trials(dataset=version).to_dict()
    # Submitted before datasets had versions: its newest.
    source = registered_source(owner=experiment.owner, name=experiment.dataset)
    if source is None and experiment.dataset not in BUILTIN_DATASETS and \
            not experiment.dataset.startswith("/"):
        raise InvalidInput(f"Dataset '{experiment.dataset}' is no longer registered.")
    return source.to_dict() if source is not None else {}


def trial_execute(*, trial_id: int, node_id: int | None = None) -> None:
    """Run this node's part of the trial: all of it, or its tasks of a multi-node gang."""
    trial = Trial.objects.select_related("experiment").filter(pk=trial_id).first()
    if trial is None or trial.state not in TRIAL_ACTIVE_STATES:
        logger.info("Trial %s is not active; ignoring its message.", trial_id)
        return
    node = Node.objects.filter(pk=node_id).first() if node_id is not None else None
    if node is not None and not allocations_claim_part(trial_id=trial.pk, node_id=node.pk):
        logger.info("Trial %s already runs on %s; ignoring a duplicate delivery.", trial_id, node)
        return
    started = trial_start(trial_id=trial.pk)
    if node is None and started is None:
        logger.info("Trial %s is already taken; ignoring a duplicate delivery.", trial_id)
        return
    plan = trial_cluster_plan(trial=trial)
    local_host = node.address if plan is not None and node is not None else LOCALHOST
    chief_here = plan is None or plan.chief.host == local_host
    experiment = trial.experiment
    recorder: TrialEventRecorder | None = None
    # A workspace's session: the workspaces app says what its node grants and revokes.
    workspace = session_hooks_for(kind=experiment.kind) is not None
    should_cancel = partial(_stop_requested, trial_id=trial.pk)
    try:
        # Before experiment_start: while this node builds the venv the experiment stays
        # "scheduled", and its pending reason says so.
        spark = node is not None and node.trial_runtime == Node.TrialRuntime.SPARK
        runtime = node_runtime(node=node)
        # A Spark cluster's executors run the trial in their own Python (no environment is
        # accepted for its pool: admission.spark_request_check).
        python = TaskPython() if spark else environment_build_ensure(
            environment=experiment.environment, node=node, experiment=experiment,
            runtime=runtime,
        )
        if chief_here and not workspace:
            trial_lineage_record(trial=trial, python=python, node=node)
        experiment_start(experiment=experiment)
        recorder = TrialEventRecorder(trial=trial)
        grant = session_begin(trial=trial) if workspace else None
        if grant is not None:
            should_cancel = partial(_session_stop_requested, trial_id=trial.pk,
                                    experiment_id=experiment.pk, kind=experiment.kind,
                                    watch=JupyterActivity(socket=grant.socket,
                                                          token=grant.jupyter_token,
                                                          base_url=grant.base_url))
        if spark:
            assert node is not None
            outcome = spark_trial_supervise(
                spec=trial_spec_build(trial=trial, grant=grant),
                target=spark_target_for(node=node, channel_host=node.address),
                on_events=recorder, should_cancel=should_cancel,
                grace_seconds=STOP_GRACE_SECONDS,
                run_dir=str(experiment_run_dir(experiment_id=experiment.pk)))
        else:
            outcome = trial_supervise(
                spec=trial_spec_build(trial=trial, grant=grant),
                on_events=recorder,
                should_cancel=should_cancel,
                grace_seconds=STOP_GRACE_SECONDS,
                cluster=plan,
                local_host=local_host,
                runtime=runtime,
                python=python,
                run_dir=str(experiment_run_dir(experiment_id=experiment.pk)),
            )
    except EnvironmentBuildFailed as error:
        outcome = TrialOutcome(status="failed", retryable=False, exit_reason=error.message)
    except InvalidInput as error:  # the trial's spec: its dataset gone, moved or now a link
        outcome = TrialOutcome(status="failed", retryable=False,
                               exit_reason=f"invalid trial: {error.message}")
    except Exception as error:
        logger.exception("Trial %s could not run", trial_id)
        outcome = TrialOutcome(
            status="failed", retryable=False, exit_reason=f"Platform error: {error}"
        )
    finally:
        close_old_connections()
        if workspace:
            database_wait(action=lambda: session_end(trial=trial),
                          what=f"revoking workspace session {trial.pk}'s token")
    if recorder is not None:
        database_wait(action=recorder.flush, what=f"recording trial {trial.pk}'s events")
    if node is not None:
        # Before the outcome requeues the trial: a disk it filled must keep the scheduler from
        # sending it straight back (the heartbeat would tell only seconds later).
        database_wait(action=lambda: node_heartbeat(
            hostname=node.hostname, work_disk_free_bytes=work_disk_free_bytes()),
            what=f"reporting node {node.hostname}'s disk")
    if chief_here or outcome.status == Trial.State.FAILED:
        # The chief's part speaks for the gang; any other part only reports its own failure.
        database_wait(action=lambda: trial_outcome_record(trial=trial, outcome=outcome),
                      what=f"recording how trial {trial.pk} ended")


def _stop_requested(*, trial_id: int) -> bool:
    # A finished trial stops the rest of its gang too (parameter servers never exit alone).
    try:
        trial = Trial.objects.filter(pk=trial_id).values("stop_reason", "state").first()
    except DATABASE_ERRORS:
        database_connection_reset()
        return False  # nobody can ask it to stop while the database is away: train on
    return trial is None or bool(trial["stop_reason"]) or trial["state"] not in TRIAL_ACTIVE_STATES


def _session_stop_requested(*, trial_id: int, experiment_id: int, kind: str,
                            watch: JupyterActivity) -> bool:
    """A workspace's session also reports Jupyter's last activity (its idle culling reads it)."""
    seen = watch.poll()
    if seen is not None:
        try:
            session_activity_record(kind=kind, experiment_id=experiment_id, at=seen)
        except DATABASE_ERRORS:
            database_connection_reset()
    return _stop_requested(trial_id=trial_id)


def trial_outcome_record(*, trial: Trial, outcome: TrialOutcome) -> None:
    trial.refresh_from_db()
    outcome = _outcome_given_stop(stop_reason=trial.stop_reason, outcome=outcome)
    outcome = replace(outcome, exit_reason=node_paths_hide(outcome.exit_reason))
    experiment = trial.experiment
    with transaction.atomic():
        finished = trial_finish(
            trial=trial,
            state=outcome.status,
            exit_reason=outcome.exit_reason,
            exit_code=_first_failure_code(outcome),
            retryable=outcome.retryable,
        )
        allocations_release(trial_id=trial.pk)
        if finished is None:
            return  # already recorded, e.g. failed as node-lost while this worker was cut off
        if outcome.devices or outcome.placement:
            trial_set_placement(
                trial=trial, placement={"devices": outcome.devices, **outcome.placement}
            )
        finish = partial(
            experiment_transition,
            experiment=experiment,
            results=outcome_results(outcome=outcome),
            strategy=outcome.strategy or None,
            strategy_reason=outcome.strategy_reason if outcome.strategy else None,
        )
        if outcome.status == Trial.State.COMPLETED:
            finish(to=State.COMPLETED)
        elif outcome.status == Trial.State.CANCELED and trial.stop_reason not in RESUMED_STOPS:
            finish(to=State.CANCELED)
        elif _restart_allowed(trial=trial, outcome=outcome):
            if outcome.status != Trial.State.CANCELED:
                reason = f"Restarting after: {outcome.exit_reason[:200]}"
            elif trial.stop_reason == RESIZED:
                reason = (f"Resizing ({trial.stop_detail[:200]}); resumes from its checkpoint "
                          "at the largest size that fits.")
            else:
                reason = "Preempted; resumes from its last checkpoint."
            finish(to=State.QUEUED, pending_reason=reason)
        else:
            finish(to=State.FAILED, error=outcome.exit_reason)
        scheduler_wake_on_commit()


# Paths on the worker node: shown to nobody (they name the server's layout), and never trusted
# (a trial reports them); deploy computes the export's place itself.
NODE_PATHS = ("attempt_dir", "export_path", "best_checkpoint_path")


def outcome_results(*, outcome: TrialOutcome) -> dict[str, Any]:
    """What an experiment shows of its trial's outcome: facts and metrics, no node paths."""
    results = {k: v for k, v in asdict(outcome).items()
               if k not in ("devices", "placement", *NODE_PATHS)}
    results["exported"] = bool(outcome.export_path)
    return results


def _outcome_given_stop(*, stop_reason: str, outcome: TrialOutcome) -> TrialOutcome:
    """A task that fails while its gang is being stopped fails because of the stop.

    Stopping a multi-node gang ends one node's tasks before another node has seen the request;
    the survivors then die on a broken collective. That is the cancel (or preemption) taking
    effect, not a fault to restart from.
    """
    if outcome.status != Trial.State.FAILED or stop_reason not in (STOP_CANCELED, *RESUMED_STOPS):
        return outcome
    return replace(
        outcome,
        status="canceled",
        retryable=False,
        exit_reason=f"{stop_reason}; a task ended while stopping: {outcome.exit_reason}",
    )


def _restart_allowed(*, trial: Trial, outcome: TrialOutcome) -> bool:
    if outcome.status == Trial.State.CANCELED:
        return True  # preemption never counts against max_restarts
    failures = trial.experiment.trials.filter(state=Trial.State.FAILED).count()
    return outcome.retryable and failures <= trial.experiment.max_restarts


def _first_failure_code(outcome: TrialOutcome) -> int | None:
    codes = [code for code in outcome.exit_codes.values() if code not in (None, 0)]
    return codes[0] if codes else 0 if outcome.exit_codes else None


def trial_fail_orphaned(*, trial_id: int, reason: str) -> None:
    """Its supervisor is gone (node lost, worker restarted): the gang fails and may restart."""
    trial = (
        Trial.objects.select_related("experiment")
        .filter(pk=trial_id, state__in=TRIAL_ACTIVE_STATES)
        .first()
    )
    if trial is None:
        allocations_release(trial_id=trial_id)
        return
    # Survivors of the gang on healthy nodes are told to stop; the gang restarts as a whole.
    trial_request_stop(trial=trial, reason=STOP_ORPHANED)
    trial_outcome_record(
        trial=trial, outcome=TrialOutcome(status="failed", retryable=True, exit_reason=reason)
    )


def node_restart_recover(*, node: Node) -> list[int]:
    """A worker that just started supervises nothing: the trials its old process held fail
    (retryably) and return to the queue."""
    trial_ids = node_trials_held_mid_run(node=node)
    for trial_id in trial_ids:
        trial_fail_orphaned(trial_id=trial_id, reason="The worker node restarted mid-trial.")
    return trial_ids


def nodes_lost_handle() -> list[int]:
    """Marks silent nodes lost and fails their trials retryably; returns the lost nodes."""
    lost = nodes_mark_lost()
    for trial_id in lost.trial_ids:
        trial_fail_orphaned(
            trial_id=trial_id,
            reason="A node running this trial stopped sending heartbeats (node lost).",
        )
    return lost.node_ids
