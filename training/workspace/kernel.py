"""A workspace's IPython kernel: the session's devices as TensorFlow sees them, then ipykernel.

Run by path (`python …/training/workspace/kernel.py -f CONNECTION`), not as a module: under
Landlock the task may read `training/` but not the folder above it, so the package cannot be
imported by a kernel it starts. A trial with k emulated GPU slots gets k logical CPU devices
(strategy.py, devices.py); a notebook on the same allocation gets the same, before any user code
can initialise TensorFlow's devices.
"""

from __future__ import annotations

import os
import sys

GPUS_ENV = "PLATFORM_WORKSPACE_GPUS"
# A session with a share of a GPU: TensorFlow's memory limit on it (MB), as a trial's.
GPU_MEMORY_ENV = "PLATFORM_WORKSPACE_GPU_MEMORY_MB"


def devices_configure() -> None:
    count = int(os.environ.get(GPUS_ENV) or 0)
    if count <= 0:
        return
    import tensorflow as tf

    limit = int(os.environ.get(GPU_MEMORY_ENV) or 0)
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus if limit else ():
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
    if not gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )


def main() -> None:
    # Run by path, its own folder leads sys.path: training's modules must not shadow others.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    devices_configure()
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


if __name__ == "__main__":
    main()
