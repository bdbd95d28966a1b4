"""Whether a node's TensorFlow can use the GPUs NVML found, asked once as the node starts: a
node that would hand trials GPUs they cannot see does not join.

    gpus_usable_check(nvml_gpus=2, python=TaskPython())   # NodeUnfit, saying why, if not
"""

from __future__ import annotations

import subprocess

from training.errors import NodeUnfit
from training.isolation.runtime import TaskPython
from training.supervisor.supervise import task_base_environment

PROBE = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
PROBE_SECONDS = 300.0  # a first CUDA start compiles kernels for the card: minutes, not hours


def gpus_usable_check(*, nvml_gpus: int, python: TaskPython) -> None:
    """Its tasks' TensorFlow (`python`, in their base environment, every GPU visible in NVML's
    order) must see all `nvml_gpus`."""
    env = task_base_environment(python=python) | {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    try:
        probe = subprocess.run([python.executable, "-c", PROBE], env=env, cwd="/",
                               capture_output=True, text=True, timeout=PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NodeUnfit(f"TensorFlow could not be started to look for the GPUs: {error}") from error
    lines = probe.stdout.split()
    if probe.returncode != 0 or not lines or not lines[-1].isdigit():
        raise NodeUnfit("TensorFlow could not be started to look for the GPUs: "
                        + (probe.stderr.strip().splitlines() or ["no output"])[-1])
    seen = int(lines[-1])
    if seen < nvml_gpus:
        raise NodeUnfit(
            f"NVML finds {nvml_gpus} GPU{'s' * (nvml_gpus != 1)} on this machine, but its "
            f"TensorFlow sees {seen}: install TensorFlow with CUDA (tensorflow[and-cuda], or "
            "the worker image built with GPU=1) and an NVIDIA driver it supports. The node "
            "does not join: its trials would hold GPUs they cannot use.")
