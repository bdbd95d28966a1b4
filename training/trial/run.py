"""What one task of a trial does, from strategy to export. Imported only inside trial processes.

Flow: resolve hyperparameters → plan and build the strategy (before anything else touches the TF
runtime, as logical devices must be configured first) → load data → build and compile the model
in the strategy scope → restore the last checkpoint → fit with per-epoch checkpoints → checksum the
final weights on every task → the chief alone exports the SavedModel and reports the result.

Parameter-server clusters: ps and worker tasks only run a TF server; the chief drives training.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np

from training import catalog
from training.arrays import ArrayData
from training.board_layout import board_available, board_callbacks
from training.data.array_pipelines import (
    dataset_creator_train,
    dataset_eval,
    dataset_train,
    steps_per_epoch,
)
from training.data.inputs import Data, data_load, data_train_examples
from training.data.pipelines import PipelineData, ProbeContext, pipeline_eval, pipeline_train
from training.events import EventWriter
from training.precision import jit_compile_apply, model_precision, precision_apply
from training.scaling import BatchPlan, batch_plan
from training.signals import StopFlag
from training.spec import TrialSpec
from training.target import target_make
from training.tf_config import ClusterPlan, TaskAddress, gpu_ids_for
from training.trial.accumulation import accumulation_apply
from training.trial.callbacks import (
    Cadence,
    EpochReporter,
    FirstStepReporter,
    StopAtEpoch,
    StopAtStep,
)
from training.trial.checkpoints import Progress, TrainingState
from training.trial.devices import devices_describe, physical_gpus_count, placement_describe
from training.trial.export import export_saved_model
from training.trial.modelling import (
    learning_rate_current,
    model_build,
    model_compile,
    user_module_load,
)
from training.trial.pi import pi_run
from training.trial.strategy import (
    MULTI_WORKER,
    PARAMETER_SERVER,
    StrategyPlan,
    gpus_visible_check,
    parameter_server_task_serve,
    strategy_build,
    strategy_finish,
    strategy_plan,
)
from training.trial.tfenv import keras, tf


def weights_checksum(weights: list[Any]) -> str:
    digest = hashlib.sha256()
    for array in weights:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def replica_checksums(*, model: Any) -> list[str]:
    """Trainable weights as each local replica holds them: equal under synchronous training."""
    variables = model.trainable_weights
    components = [getattr(v, "values", None) or (v,) for v in variables]
    replicas = min(len(c) for c in components) if components else 0
    return [weights_checksum([c[r].numpy() for c in components]) for r in range(replicas)]


def _strategy_start(*, spec: TrialSpec, events: EventWriter, flag: StopFlag
                    ) -> tuple[Any, StrategyPlan]:
    plan = strategy_plan(resources=spec.resources, physical_gpus=physical_gpus_count())
    strategy = strategy_build(plan=plan)
    # TF's coordination service installs its own SIGTERM notifier (for its preemption handler),
    # which would swallow the signal; ours must win so a cancel actually stops the task.
    flag.install()
    events.emit("status", phase="strategy", strategy=plan.name, reason=plan.reason,
                emulated=plan.emulated, replicas=int(strategy.num_replicas_in_sync),
                tensorflow_version=tf.__version__)
    return strategy, plan


def trial_run(*, spec: TrialSpec, cluster: ClusterPlan, task: TaskAddress, events: EventWriter,
              flag: StopFlag) -> None:
    held = len(gpu_ids_for(resources=spec.resources, task=task))
    if spec.resources.gpus_physical and held:
        gpus_visible_check(resources=spec.resources, held=held, visible=physical_gpus_count())
    if spec.model == catalog.WORKSPACE_JOB:
        from training.workspace.session import workspace_serve  # imports Jupyter

        workspace_serve(spec=spec, events=events)
        return
    if cluster.uses_parameter_servers and task.type != "chief":
        events.emit("status", phase="serving", role=task.type)
        parameter_server_task_serve(stop_requested=lambda: flag.requested,
                                    after_start=flag.install)
        return
    hparams = catalog.hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
    is_chief = task == cluster.chief
    strategy, plan = _strategy_start(spec=spec, events=events, flag=flag)
    flag.check()
    if spec.model in catalog.DIAGNOSTIC_JOBS:
        events.emit("devices", devices=devices_describe(),
                    placement=placement_describe(strategy=strategy, variables=[]))
        result = pi_run(strategy=strategy, plan=plan, hparams=hparams, events=events,
                        is_chief=is_chief)
        if is_chief:
            events.emit("result", final_metrics=result, epochs_completed=1)
    else:
        _train(spec=spec, hparams=hparams, strategy=strategy, plan=plan, is_chief=is_chief,
               cluster=cluster, task=task, events=events, flag=flag)
    strategy_finish(plan=plan, is_chief=is_chief)


def _input_place(*, plan: StrategyPlan, strategy: Any, cluster: ClusterPlan, task: TaskAddress
                 ) -> ProbeContext:
    """Where this task's input pipeline stands, before TF hands out its InputContexts."""
    replicas = int(strategy.num_replicas_in_sync)
    if plan.name != MULTI_WORKER:
        return ProbeContext(num_replicas_in_sync=replicas)
    workers = sum(1 for t in cluster.tasks if t.type in ("chief", "worker"))
    return ProbeContext(num_input_pipelines=workers, input_pipeline_id=task.index,
                        num_replicas_in_sync=replicas)


def _train(*, spec: TrialSpec, hparams: dict[str, Any], strategy: Any, plan: StrategyPlan,
           is_chief: bool, cluster: ClusterPlan, task: TaskAddress, events: EventWriter,
           flag: StopFlag) -> None:
    # Same seed everywhere: identical initial weights even before MWMS broadcasts the chief's.
    keras.utils.set_random_seed(hparams["seed"])
    module = None if spec.model in catalog.ZOO_MODELS else user_module_load(path=spec.model)
    parameter_servers = plan.name == PARAMETER_SERVER
    batch = batch_plan(
        batch_size=hparams["batch_size"], replicas=int(strategy.num_replicas_in_sync),
        learning_rate=hparams["learning_rate"], scale=hparams["scale_batch_size"],
        warmup_epochs=hparams["warmup_epochs"],
        # Asynchronous workers apply their own batches: there is no global batch to keep.
        replicas_target=0 if parameter_servers else spec.resources.replicas_target,
    )
    data = data_load(spec=spec, hparams=hparams, module=module,
                     global_batch_size=batch.global_batch_size,
                     probe=_input_place(plan=plan, strategy=strategy, cluster=cluster, task=task))
    steps = steps_per_epoch(examples=data_train_examples(data=data),
                            global_batch=batch.global_batch_size)
    gpus = tf.config.list_physical_devices("GPU")
    precision = precision_apply(policy=hparams["mixed_precision"], gpus=gpus)
    with strategy.scope():
        model = model_build(spec=spec, hparams=hparams, data=data, module=module)
        platform_compiled = model_compile(model=model, hparams=hparams, batch=batch,
                                          steps_per_epoch=steps, exact_evaluation=parameter_servers)
        if hparams["jit_compile"]:
            jit_compile_apply(model=model, replicas=int(strategy.num_replicas_in_sync), gpus=gpus)
        accumulation_apply(model=model, steps=batch.accumulation_steps)
        # Optimizer slots must exist before a restore can fill them (legacy optimizers
        # create theirs lazily and restore deferred instead).
        if callable(getattr(model.optimizer, "build", None)):
            model.optimizer.build(model.trainable_variables)
    if not platform_compiled:
        # The module chose its own optimizer: report its rate instead of the one we would use.
        batch = replace(batch, learning_rate=learning_rate_current(model=model),
                        rule=batch.rule + "; the module compiled its own optimizer, its learning "
                        "rate is used as is")
    events.emit("status", phase="batch", **batch.as_dict(), steps_per_epoch=steps,
                dataset=data.summary(), platform_compiled=platform_compiled)
    events.emit("status", phase="precision", **precision, **model_precision(model=model),
                jit_compile=bool(model.jit_compile))
    for note in precision["notes"] if is_chief else []:
        events.emit("log", message=f"mixed_precision: {note}")
    events.emit("devices", devices=devices_describe(),
                placement=placement_describe(strategy=strategy, variables=model.weights))
    # One process holds every replica: TF can write its checkpoints asynchronously, and a stop
    # can be checkpointed mid-epoch (callbacks.py says why the others cannot).
    single_process = plan.name not in (MULTI_WORKER, PARAMETER_SERVER)
    state = TrainingState(model=model, work_dir=spec.work_dir, is_chief=is_chief, task=task.name,
                          steps_per_epoch=steps, asynchronous=single_process)
    progress = state.restore()
    if progress.epoch_steps >= steps:
        # The data or batch size changed since: the epoch's remaining steps are unknown.
        progress.epoch_steps = 0
    resumed_from = progress.epochs_completed
    if resumed_from or progress.epoch_steps:
        # The optimizer step proves the optimizer state came back, not just the weights.
        events.emit("status", phase="resumed", from_epoch=resumed_from,
                    optimizer_step=int(model.optimizer.iterations.numpy()),
                    **({"from_step": progress.epoch_steps} if progress.epoch_steps else {}))
        if is_chief:
            # A gang can die between saving an epoch's checkpoint and reporting it (the best-
            # weights write is a collective); the recorder keeps only epochs it never saw.
            for record in progress.history:
                events.emit("metric", replayed=True, **record)
    flag.check()
    if resumed_from < hparams["epochs"] and not _target_done(progress=progress, hparams=hparams):
        _fit(model=model, data=data, strategy=strategy, hparams=hparams, batch=batch, steps=steps,
             state=state, progress=progress, spec=spec, plan=plan, is_chief=is_chief,
             events=events, flag=flag)
    weights = [np.asarray(w) for w in model.get_weights()]  # a collective under MWMS: all tasks
    events.emit("weights", checksum=weights_checksum([w.numpy() for w in model.trainable_weights]),
                replica_checksums=replica_checksums(model=model))
    if not is_chief:
        return
    events.emit("status", phase="exporting")
    plain = model_build(spec=spec, hparams=hparams, data=data, module=module)
    plain.set_weights(weights)
    exported = export_saved_model(model=plain, data=data, export_dir=f"{spec.work_dir}/export",
                                  classifier=platform_compiled, from_logits=hparams["from_logits"])
    events.emit("export", **exported)
    best = sorted(state.best_dir.glob("*.index"))
    events.emit(
        "result", final_metrics=progress.history[-1] if progress.history else {},
        epochs_completed=progress.epochs_completed, resumed_from_epoch=resumed_from,
        time_to_target_seconds=progress.time_to_target_seconds, export_path=exported["path"],
        best_checkpoint_path=str(best[0].with_suffix("")) if best else "",
        best_val_accuracy=progress.best_val_accuracy, best_epoch=progress.best_epoch,
        best_metric=progress.best_metric, best_value=progress.best_value,
        train_seconds=round(progress.train_seconds, 3),
    )


def _target_done(*, progress: Progress, hparams: dict[str, Any]) -> bool:
    return bool(hparams["stop_at_target"] and progress.time_to_target_seconds is not None)


def _fit(*, model: Any, data: Data, strategy: Any, hparams: dict[str, Any], batch: BatchPlan,
         steps: int, state: TrainingState, progress: Progress, spec: TrialSpec,
         plan: StrategyPlan, is_chief: bool, events: EventWriter, flag: StopFlag) -> None:
    parameter_servers = plan.name == PARAMETER_SERVER
    validation_steps = None
    exact: ArrayData | None = None  # an array pipeline that starts at each fit's (epoch, step)
    if isinstance(data, PipelineData):
        train = pipeline_train(data=data, strategy=strategy, hparams=hparams,
                               global_batch=batch.global_batch_size,
                               parameter_servers=parameter_servers)
        validation, validation_steps = pipeline_eval(
            data=data, strategy=strategy, hparams=hparams, global_batch=batch.global_batch_size,
            parameter_servers=parameter_servers)
    elif parameter_servers:
        train = dataset_creator_train(data=data, global_batch=batch.global_batch_size,
                                      augment=hparams["augment"])
        validation = dataset_eval(data=data, batch_size=batch.global_batch_size)
    else:
        exact = data
        validation = dataset_eval(data=data, batch_size=batch.global_batch_size)
    cadence = _cadence(plan=plan, hparams=hparams, events=events, is_chief=is_chief)
    reporter = EpochReporter(
        events=events, state=state, progress=progress, batch=batch, steps_per_epoch=steps,
        epochs=hparams["epochs"], interval_seconds=hparams["throughput_interval_seconds"],
        target=target_make(metric=spec.target_metric, mode=spec.target_mode,
                           value=spec.target_value),
        stop_at_target=hparams["stop_at_target"],
        is_chief=is_chief, cadence=cadence,
    )
    events.emit("status", phase="training", from_epoch=progress.epochs_completed,
                epochs=hparams["epochs"], checkpoint_interval_seconds=cadence.interval_seconds)
    # Parameter-server fit allows no step hooks, so a stop cannot wait for a step boundary.
    stopper = (StopAtEpoch(flag=flag) if parameter_servers
               else StopAtStep(flag=flag, reporter=reporter))
    callbacks = [stopper, reporter]
    if is_chief and not parameter_servers:
        callbacks.append(FirstStepReporter(events=events))
    if board_available():
        callbacks += board_callbacks(work_dir=spec.work_dir, hparams=hparams, is_chief=is_chief)
    elif is_chief:
        events.emit("log", message="TensorBoard: this environment has no tensorboard package, "
                    "so the trial writes no event files (add tensorboard to its packages)")
    flag.immediate = parameter_servers
    fits = []
    if progress.epoch_steps:
        # A checkpoint taken mid-epoch: the rest of that epoch first. An array pipeline starts
        # at its exact batch; others take a fresh pass over the data (as tf-keras'
        # BackupAndRestore resumes mid-epoch).
        fits.append((progress.epochs_completed + 1, steps - progress.epoch_steps))
    fits.append((hparams["epochs"], steps))
    try:
        for epochs, epoch_steps in fits:
            if progress.epochs_completed >= epochs or _target_done(progress=progress,
                                                                   hparams=hparams):
                break
            if exact is not None:
                # One iterator per fit (the data is endless and steps_per_epoch given, so tf-keras
                # keeps it across epochs): positioned where this fit starts.
                train = dataset_train(data=exact, batch_size=batch.global_batch_size,
                                      seed=hparams["seed"], augment=hparams["augment"],
                                      start_epoch=progress.epochs_completed,
                                      start_step=progress.epoch_steps)
            model.fit(
                train, epochs=epochs, initial_epoch=progress.epochs_completed,
                steps_per_epoch=epoch_steps,
                validation_data=validation, validation_steps=validation_steps,
                callbacks=callbacks, verbose=0,
            )
    except BaseException:
        state.abandon()
        raise
    finally:
        flag.immediate = False
    flag.check()  # a stop at the last epoch's last step: saved by its end, not exported


def _cadence(*, plan: StrategyPlan, hparams: dict[str, Any], events: EventWriter,
             is_chief: bool) -> Cadence:
    interval = float(hparams["checkpoint_interval_seconds"])
    if plan.name == MULTI_WORKER:
        if interval and is_chief:
            events.emit("log", message="checkpoint_interval_seconds: multi-worker training "
                        "checkpoints every epoch (a save is a collective, and workers cannot "
                        "agree on a clock), so the interval is not used")
        return Cadence(interval_seconds=0.0, mid_epoch=False)
    return Cadence(interval_seconds=interval, mid_epoch=plan.name != PARAMETER_SERVER)
