"""What a node reads from NVML on a real NVIDIA GPU, and what bounds a share of one there.

These tests run only where NVML finds a GPU: CI has none, so they are skipped there and run on
a GPU machine (`make gpu-check`, which needs neither the database nor TensorFlow). Each asserts
what the platform's own functions report against what the driver says."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfplatform.cluster.discovery import (
    devices_inventory,
    gpus_discover,
    gpus_utilization,
)
from tfplatform.cluster.placement import WHOLE_MILLI, TaskNeed, share_of
from tfplatform.cluster.pools import gpu_type_choose
from training.isolation.containers import gpu_uuids
from training.spec import Resources
from training.supervisor.supervise import gpu_share_environment

GPUS = gpus_discover()
pytestmark = pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU here (NVML found none)")


def nvidia_smi(*fields: str) -> list[str]:
    """nvidia-smi's answer for GPU 0: the driver's word, beside NVML's as our code reads it."""
    out = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(fields)}",
                          "--format=csv,noheader,nounits"],
                         check=True, capture_output=True, text=True).stdout
    return [value.strip() for value in out.strip().split(",")]


def test_discovery_reports_each_gpu_as_the_driver_does() -> None:
    name, memory_mib, uuid, capability = nvidia_smi("name", "memory.total", "uuid",
                                                    "compute_cap")
    first = GPUS[0]
    assert (first.name, first.uuid, first.compute_capability) == (name, uuid, capability)
    assert first.memory_bytes // 2**20 == int(memory_mib)
    assert not first.emulated
    assert [gpu.index for gpu in GPUS] == list(range(len(GPUS)))
    # Real GPUs replace declared slots; the node's GPU type is NVML's name unless configured.
    devices = devices_inventory(gpus=GPUS, declared_gpu_slots=8, cpu_slots=1)
    assert [d.emulated for d in devices if d.kind == "gpu"] == [False] * len(GPUS)
    assert gpu_type_choose(configured="", discovered=[g.name for g in GPUS]) == name
    assert gpu_type_choose(configured="h200-pool", discovered=[name]) == "h200-pool"
    # A container engine is handed the GPU by the UUID discovery recorded.
    assert gpu_uuids(indices=(0,)) == (uuid,)
    print(f"discovered: {first}")


def test_a_share_asked_as_memory_is_that_part_of_the_real_card() -> None:
    memory_mb = GPUS[0].memory_bytes // 2**20
    quarter = share_of(need=TaskNeed("worker", 0, 1, 1, gpu_memory_mb=memory_mb // 4),
                       memory_mb=memory_mb)
    assert quarter is not None and WHOLE_MILLI // 4 <= quarter <= WHOLE_MILLI // 4 + 1
    assert share_of(need=TaskNeed("worker", 0, 1, 1, gpu_memory_mb=memory_mb + 1),
                    memory_mb=memory_mb) is None


@pytest.fixture
def torch_cuda() -> object:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def test_utilization_reads_busy_while_a_kernel_runs_and_idle_after(torch_cuda: object) -> None:
    torch: object = torch_cuda
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(8192, 8192, device="cuda")  # type: ignore[attr-defined]
        while not stop.is_set():
            for _ in range(20):
                a = a @ a
                a = a / a.norm()
            torch.cuda.synchronize()  # type: ignore[attr-defined]

    worker = threading.Thread(target=load)
    worker.start()
    try:
        busy = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(v >= 50 for v in busy):
            time.sleep(0.5)
            busy.append(gpus_utilization().get(0, -1.0))
    finally:
        stop.set()
        worker.join()
    assert max(busy) >= 50, busy
    time.sleep(2)  # NVML's sample period is under a second
    idle = gpus_utilization()[0]
    assert idle < 50, (busy, idle)
    print(f"utilization busy {busy}, idle {idle}")


ALLOCATE = textwrap.dedent("""
    import sys, torch
    gib = int(sys.argv[1])
    try:
        block = torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        print("allocated", gib)
    except torch.OutOfMemoryError as error:
        print("refused", gib, str(error).splitlines()[0])
        sys.exit(3)
""")


@pytest.fixture
def mps_daemon(tmp_path: Path, torch_cuda: object) -> Iterator[dict[str, str]]:
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("no nvidia-cuda-mps-control on this machine (MPS not installed)")
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log")}
    for folder in env.values():
        os.makedirs(folder)
    started = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True,
                             text=True, check=False)
    if started.returncode != 0:
        pytest.skip(f"the MPS daemon did not start: {started.stderr.strip()}")
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", env={**os.environ, **env}, text=True,
                       check=False, timeout=30)
        print("MPS control log:", (tmp_path / "log" / "control.log").read_text()[-2000:]
              if (tmp_path / "log" / "control.log").exists() else "none")


def test_mps_holds_a_quarter_share_to_its_memory_limit(mps_daemon: dict[str, str]) -> None:
    share = Resources(gpus_per_worker=1, gpu_share_milli=250, gpu_memory_limit_mb=4096,
                      gpu_mps=True)
    limits = gpu_share_environment(resources=share)
    assert limits["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"

    def allocate(gib: int, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", ALLOCATE, str(gib)], capture_output=True,
                              text=True, timeout=120, check=False,
                              env={**os.environ, **mps_daemon, **extra,
                                   "CUDA_VISIBLE_DEVICES": "0"})

    within, beyond = allocate(2, limits), allocate(6, limits)
    unbounded = allocate(6, {})
    print(within.stdout, beyond.stdout, unbounded.stdout, beyond.stderr[-2000:])
    assert within.returncode == 0, within.stderr[-2000:]
    assert beyond.returncode == 3 and re.search(r"refused 6", beyond.stdout), beyond.stderr
    assert unbounded.returncode == 0, unbounded.stderr[-2000:]
