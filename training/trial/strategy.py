"""The one place a tf.distribute strategy is chosen and built, from the allocation alone.

    parameter servers granted → ParameterServerStrategy (ps tasks, workers, chief coordinator)
    several workers           → MultiWorkerMirroredStrategy (TF_CONFIG from the supervisor)
    1 worker, k ≥ 2 GPUs      → MirroredStrategy over the k devices
    1 worker, 1 GPU           → OneDeviceStrategy
    1 worker, no GPU          → the default strategy (CPU)

GPU slots on a machine without a visible GPU are emulated: k logical CPU devices become the
replicas, so the same code path (variables mirrored, gradients all-reduced) runs on a laptop. Only
single-worker strategies can use them: TF's multi-worker strategies place one replica per worker on
CPU, which the reason string says. `strategy_plan` is TF-free so the web can show the choice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from training.errors import NodeUnfit
from training.spec import Resources

DEFAULT = "default"
ONE_DEVICE = "OneDeviceStrategy"
MIRRORED = "MirroredStrategy"
MULTI_WORKER = "MultiWorkerMirroredStrategy"
PARAMETER_SERVER = "ParameterServerStrategy"


@dataclass(frozen=True)
class StrategyPlan:
    name: str
    reason: str
    devices_per_worker: int  # GPU slots this worker uses (physical or emulated), 0 for CPU
    emulated: bool  # GPU slots realised as logical CPU devices
    workers: int
    # TensorFlow's memory limit on each visible GPU (MB): the worker holds a share of it.
    memory_limit_mb: int = 0


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def strategy_plan(*, resources: Resources, physical_gpus: int) -> StrategyPlan:
    """Which strategy the allocation implies; `physical_gpus` is what this process can see. A
    share of a GPU plans like one GPU, with TensorFlow's memory limit on it where the GPU is
    real and its memory known (an emulated slot has no memory to bound)."""
    plan = _strategy_choose(resources=resources, physical_gpus=physical_gpus)
    if not resources.gpu_share_milli:
        return plan
    share = f"{resources.gpu_share_milli / 1000:g} of one GPU"
    if physical_gpus and resources.gpu_memory_limit_mb:
        return replace(plan, memory_limit_mb=resources.gpu_memory_limit_mb,
                       reason=f"{plan.reason}; {share}, TensorFlow limited to "
                              f"{resources.gpu_memory_limit_mb} MB of its memory")
    return replace(plan, reason=f"{plan.reason}; {share} (its memory is not bounded: "
                                f"{'unknown' if physical_gpus else 'no physical GPU'})")


def _strategy_choose(*, resources: Resources, physical_gpus: int) -> StrategyPlan:
    k, workers, ps = resources.gpus_per_worker, resources.workers, resources.parameter_servers
    emulated = k > 0 and physical_gpus == 0
    note = ""
    if emulated:
        note = f" (emulated as {_plural(k, 'logical CPU device')}: no physical GPU visible)"
    elif 0 < physical_gpus < k:
        note = f" (only {_plural(physical_gpus, 'GPU')} visible, using those)"
        k = physical_gpus
    if ps:
        # The chief sees no GPU of its own; the workers' devices are whatever they were granted.
        per_worker = resources.gpus_per_worker
        gpus = f" × {_plural(per_worker, 'GPU')}" if per_worker else ""
        reason = (
            f"{_plural(ps, 'parameter server')} and {_plural(workers, 'worker')}{gpus} → "
            f"{PARAMETER_SERVER} (asynchronous updates; the chief coordinates)"
        )
        return StrategyPlan(PARAMETER_SERVER, reason, resources.gpus_per_worker, False, workers)
    if workers > 1:
        gpus = f" × {_plural(k, 'GPU')}" if k else ""
        reason = f"{_plural(workers, 'worker')}{gpus} → {MULTI_WORKER} (synchronous all-reduce)"
        if emulated:
            reason += "; one CPU replica per worker, GPU slots are not emulated across workers"
            return StrategyPlan(MULTI_WORKER, reason, 0, False, workers)
        return StrategyPlan(MULTI_WORKER, reason + note, k, False, workers)
    if k == 0:
        return StrategyPlan(DEFAULT, "no GPU on 1 worker → default strategy (CPU)", 0, False, 1)
    if k == 1:
        return StrategyPlan(ONE_DEVICE, f"1 GPU on one node → {ONE_DEVICE}{note}", 1, emulated, 1)
    return StrategyPlan(MIRRORED, f"{k} GPUs on one node → {MIRRORED}{note}", k, emulated, 1)


def gpus_visible_check(*, resources: Resources, held: int, visible: int) -> None:
    """A task granted `held` real GPUs (NVML found them on its node) must see them all: with
    fewer, it would quietly train on emulated CPU devices, or on a part of what it holds."""
    if resources.gpus_physical and visible < held:
        raise NodeUnfit(
            f"This task holds {_plural(held, 'GPU')} of its node, but its TensorFlow sees "
            f"{visible}: the node's TensorFlow has no CUDA support (the worker image built "
            "without GPU=1, or tensorflow without [and-cuda]) or its NVIDIA driver does not "
            "match. Not emulated: the operator must fix the node.")


def gpu_memory_configure(*, config: Any, gpus: list[Any], limit_mb: int) -> None:
    """Before user code touches the GPUs: a share's hard limit (TF's allocator never takes more
    than `limit_mb` on each), else growth on demand (a node's GPUs may also host serving or
    another trial's tasks). `config` is `tf.config`."""
    for gpu in gpus:
        if limit_mb:
            config.set_logical_device_configuration(
                gpu, [config.LogicalDeviceConfiguration(memory_limit=limit_mb)])
        else:
            config.experimental.set_memory_growth(gpu, True)


def strategy_build(*, plan: StrategyPlan) -> Any:
    """Builds the planned strategy; must run before anything else initialises the TF runtime."""
    from training.trial.devices import logical_cpus_configure
    from training.trial.tfenv import tf

    if plan.emulated:
        logical_cpus_configure(count=plan.devices_per_worker)
    gpu_memory_configure(config=tf.config, gpus=tf.config.list_physical_devices("GPU"),
                         limit_mb=plan.memory_limit_mb)
    kind = "CPU" if plan.emulated else "GPU"
    local = [f"/device:{kind}:{i}" for i in range(plan.devices_per_worker)]
    if plan.name == DEFAULT:
        return tf.distribute.get_strategy()
    if plan.name == ONE_DEVICE:
        return tf.distribute.OneDeviceStrategy(local[0])
    if plan.name == MIRRORED:
        # NCCL only exists between GPUs; CPU replicas reduce through host memory.
        ops = None if kind == "GPU" else tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices=local, cross_device_ops=ops)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if plan.name == MULTI_WORKER:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    if plan.name == PARAMETER_SERVER:
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    raise ValueError(f"unknown strategy {plan.name}")


def strategy_finish(*, plan: StrategyPlan, is_chief: bool) -> None:
    """Keeps every process of a synchronous cluster alive until all are past their collectives.

    A worker leaving right after its last all-reduce can still owe a peer data (peers fetch
    buffers lazily), which fails that peer with "Connection reset by peer". So all workers meet
    at a coordination-service barrier; the chief hosts that service, so it lingers briefly for
    the barrier's replies to reach the others before it exits.
    """
    if plan.name != MULTI_WORKER:
        return
    from tensorflow.python.eager import context

    context.context().wait_at_barrier("training.trial.run.finished", timeout_in_ms=600_000)
    if is_chief:
        time.sleep(1.0)


def parameter_server_task_serve(
    *, stop_requested: Callable[[], bool], after_start: Callable[[], None]
) -> None:
    """A ps or worker task of a ParameterServerStrategy cluster: serve the chief until stopped."""
    from training.trial.tfenv import tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    after_start()  # the server may have replaced the SIGTERM handler
    # server.join() never returns; polling lets SIGTERM end the task cleanly instead.
    while not stop_requested():
        time.sleep(0.2)
    del server
