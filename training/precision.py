"""Mixed precision and XLA, as hyperparameters the platform applies to any model.

    mixed_precision: "" (TF's float32) | "mixed_float16" | "mixed_bfloat16"
    jit_compile:     compile the train step with XLA

What the hardware cannot use is refused, never silently ignored: float16 compute needs NVIDIA GPUs
of compute capability 7.0 or newer (Tensor Cores; TF would otherwise run it slowly, or emulate it
on CPUs), bfloat16 on GPUs needs 8.0 or newer. XLA cannot compile a step whose variables live on
parameter servers, nor the collectives of several replicas on CPUs. bfloat16 on CPUs works
everywhere; without the AVX512-BF16 or AMX instructions it is converted in software and a note
says it will be slow.
`precision_check` is TF-free (the web process refuses at submission); `precision_apply` runs in
the trial, where the devices are known.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.errors import InvalidInput
from training.spec import Resources

FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16 = "", "mixed_float16", "mixed_bfloat16"
POLICIES = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)
# The lowest compute capability whose GPUs compute in this type at speed.
GPU_CAPABILITY = {MIXED_FLOAT16: (7, 0), MIXED_BFLOAT16: (8, 0)}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")

XLA_CPU_COLLECTIVES = (
    "jit_compile with several replicas needs GPUs: XLA has no collectives for CPU devices "
    "(tensorflow b/194942685); train on one replica, or without jit_compile"
)


def precision_check(*, policy: str, jit_compile: bool, resources: Resources) -> None:
    """What can be refused before anything runs (the name is catalog's to check): float16
    without GPUs, XLA where TF cannot compile the step."""
    if policy == MIXED_FLOAT16 and resources.gpus_per_worker == 0:
        raise InvalidInput(
            "mixed_float16 needs NVIDIA GPUs (compute capability 7.0 or newer) and this trial "
            "asks for none; ask for GPUs, or use mixed_bfloat16, which CPUs can run"
        )
    if not jit_compile:
        return
    if resources.parameter_servers:
        raise InvalidInput(
            "jit_compile cannot be used with parameter servers: XLA compiles a step only "
            "with the variables on its own device, and these live on the servers"
        )
    if resources.workers > 1 and resources.gpus_per_worker == 0:
        raise InvalidInput(XLA_CPU_COLLECTIVES)


def precision_apply(*, policy: str, gpus: list[Any]) -> dict[str, Any]:
    """Sets Keras's global dtype policy before the model is built; returns what was applied.

    `gpus`: this task's physical GPUs (tf.config.list_physical_devices("GPU")).
    """
    from training.trial.tfenv import keras, tf

    notes: list[str] = []
    if policy:
        needed = GPU_CAPABILITY[policy]
        if gpus:
            for gpu in gpus:
                capability = tuple(tf.config.experimental.get_device_details(gpu).get(
                    "compute_capability") or (0, 0))
                if capability < needed:
                    raise InvalidInput(
                        f"{policy} needs GPUs of compute capability {needed[0]}.{needed[1]} or "
                        f"newer; {gpu.name} has {capability[0]}.{capability[1]}"
                    )
        elif policy == MIXED_FLOAT16:
            raise InvalidInput(
                "mixed_float16 needs NVIDIA GPUs (compute capability 7.0 or newer); this "
                "node's GPU slots are emulated on its CPUs, which have no float16 units"
            )
        elif not cpu_has_bf16():
            notes.append("this CPU has no bfloat16 instructions (AVX512-BF16, AMX): bfloat16 "
                         "is converted in software and trains slower than float32")
    keras.mixed_precision.set_global_policy(policy or "float32")
    return {"policy": keras.mixed_precision.global_policy().name, "notes": notes}


def jit_compile_apply(*, model: Any, replicas: int, gpus: list[Any]) -> None:
    """XLA for the compiled model's train, test and predict steps (the platform's compile or the
    module's own); refused where TF cannot compile them."""
    if replicas > 1 and not gpus:  # GPU slots emulated on CPUs: the check at submission passed
        raise InvalidInput(f"{XLA_CPU_COLLECTIVES}; this node's GPU slots are emulated on CPUs")
    model.jit_compile = True
    if not model.jit_compile:  # Keras turns it back off where TF has no XLA
        raise InvalidInput("jit_compile: this node's TensorFlow cannot compile with XLA")


def model_precision(*, model: Any) -> dict[str, str]:
    """The dtypes the built model computes and keeps its weights in (its first layer's)."""
    layer = model.layers[0] if model.layers else model
    return {"compute_dtype": str(layer.compute_dtype), "variable_dtype": str(layer.variable_dtype)}


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(flag in flags for flag in CPU_BF16_FLAGS)

