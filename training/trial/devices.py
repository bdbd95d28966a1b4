"""Device set-up and the device/placement report a trial publishes once its strategy exists.

The report mirrors what TF's own start-up log says ("Created device ... with N MB memory: ->
device: 0, name: ..., compute capability: x.y") plus where the model's variables ended up, so a
user can see that "2 GPUs" really meant two replicas without reading worker logs.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from training.trial.tfenv import tf


def logical_cpus_configure(*, count: int) -> None:
    """Splits the host CPU into `count` logical devices that stand in for GPU slots."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    )


def physical_gpus_count() -> int:
    return len(tf.config.list_physical_devices("GPU"))


def _gpu_total_memory_mb(index: int) -> int | None:
    # TF only exposes current/peak usage; NVML knows the card's size. Absent on CPU-only hosts.
    try:
        import pynvml

        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [int(i) for i in visible.split(",") if i.strip().isdigit()]
        handle = pynvml.nvmlDeviceGetHandleByIndex(ids[index] if index < len(ids) else index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
    except Exception:
        return None


def _host_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return None


def devices_describe() -> list[dict[str, Any]]:
    """Physical devices with their capabilities, and the logical devices TF created on them."""
    described: list[dict[str, Any]] = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        memory = _gpu_total_memory_mb(index)
        name = details.get("device_name", "GPU")
        described.append({
            "name": device.name,
            "device_type": "GPU",
            "model": name,
            "memory_mb": memory,
            "compute_capability": ".".join(map(str, capability)) if capability else None,
            "log_line": (
                f"Created device {device.name} with {memory or '?'} MB memory: -> device: {index}, "
                f"name: {name}, compute capability: {'.'.join(map(str, capability or ()))}"
            ),
        })
    memory = _host_memory_mb()
    for device in tf.config.list_physical_devices("CPU"):
        logical = tf.config.get_logical_device_configuration(device) or []
        described.append({
            "name": device.name,
            "device_type": "CPU",
            "model": f"host CPU ({os.cpu_count()} cores)",
            "memory_mb": memory,
            "compute_capability": None,
            "logical_devices": max(1, len(logical)),
            "log_line": f"Created device {device.name} with {memory or '?'} MB host memory"
            + (f", split into {len(logical)} logical devices" if logical else ""),
        })
    return described


def _variable_devices(variable: Any) -> list[str]:
    values = getattr(variable, "values", None)
    if values is not None:  # mirrored / distributed: one component per replica device
        return [str(v.device) for v in values]
    return [str(variable.device)]


def placement_describe(*, strategy: Any, variables: list[Any]) -> dict[str, Any]:
    """Replica devices and, per device, how many model variables live there."""
    extended = strategy.extended
    per_device: Counter[str] = Counter()
    for variable in variables:
        per_device.update(_variable_devices(variable))
    def listed(attribute: str) -> list[str]:
        try:  # the default strategy refuses to answer rather than saying "the one CPU"
            return [str(d) for d in getattr(extended, attribute)]
        except (AttributeError, NotImplementedError, RuntimeError):
            return []

    return {
        "replicas_in_sync": int(strategy.num_replicas_in_sync),
        "replica_devices": listed("worker_devices"),
        "parameter_devices": listed("parameter_devices"),
        "variables": len(variables),
        "variables_per_device": dict(sorted(per_device.items())),
        "example": {
            variables[0].name: _variable_devices(variables[0])
        } if variables else {},
    }
