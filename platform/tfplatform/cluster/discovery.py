"""What this machine has: devices (NVML for real GPUs, plus slots declared in configuration),
memory, and free space on its work disk."""

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from tfplatform.cluster.placement import KIND_CPU, KIND_GPU

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    kind: str
    index: int
    name: str
    memory_bytes: int = 0
    compute_capability: str = ""
    emulated: bool = False
    uuid: str = ""


def gpus_discover() -> list[DeviceInfo]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        # No driver or no GPU: the normal case on CPU machines.
        logger.info("NVML unavailable (%s); no GPUs discovered.", error)
        return []
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpu_uuid = pynvml.nvmlDeviceGetUUID(handle)
            devices.append(
                DeviceInfo(
                    kind=KIND_GPU,
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    compute_capability=f"{major}.{minor}",
                    uuid=gpu_uuid.decode() if isinstance(gpu_uuid, bytes) else str(gpu_uuid),
                )
            )
        return devices
    finally:
        pynvml.nvmlShutdown()


def gpus_utilization() -> dict[int, float]:
    """GPU index → utilization in percent over NVML's last sample period; empty without NVML
    (emulated slots are not measured: callers show "not measured", never 0)."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}
    try:
        measured = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                measured[index] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except pynvml.NVMLError:
                continue  # a GPU that does not report (some vGPUs): not measured, not 0
        return measured
    finally:
        pynvml.nvmlShutdown()


def devices_discover(*, declared_gpu_slots: int, cpu_slots: int) -> list[DeviceInfo]:
    """Real GPUs if NVML finds any, else declared slots emulated by logical CPU devices."""
    return devices_inventory(gpus=gpus_discover(), declared_gpu_slots=declared_gpu_slots,
                             cpu_slots=cpu_slots)


def devices_inventory(*, gpus: list[DeviceInfo], declared_gpu_slots: int,
                      cpu_slots: int) -> list[DeviceInfo]:
    """The node's devices given the GPUs NVML found: declared slots stand in only for none."""
    if not gpus:
        gpus = [
            DeviceInfo(kind=KIND_GPU, index=i, name=f"emulated accelerator slot {i}", emulated=True)
            for i in range(declared_gpu_slots)
        ]
    cpus = [
        DeviceInfo(kind=KIND_CPU, index=i, name=f"CPU slot {i} ({os.cpu_count()} cores shared)")
        for i in range(cpu_slots)
    ]
    return gpus + cpus


# Emulated slots get UUIDs shaped like NVML's ("GPU-" and a UUID), the same on every start.
EMULATED_UUID_NAMESPACE = uuid.UUID("5b0f3c1e-8d2a-4c55-9a43-2f7e1d6b9c80")


def emulated_gpu_uuid(*, hostname: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(EMULATED_UUID_NAMESPACE, f'{hostname}/gpu/{index}')}"


def memory_total_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def work_disk_free_bytes() -> int | None:
    """The least free space under the node's trial folders (work and run); None if neither
    exists yet."""
    return disk_free_bytes(paths=[settings.PLATFORM.work_dir, settings.PLATFORM.run_dir])


def disk_free_bytes(*, paths: list[Path]) -> int | None:
    free = []
    for path in paths:
        try:
            free.append(shutil.disk_usage(path).free)
        except OSError:
            continue
    return min(free, default=None)
