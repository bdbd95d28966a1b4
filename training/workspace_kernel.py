"""A workspace's IPython kernel: the session's devices as TensorFlow sees them, then ipykernel.

A trial with k emulated GPU slots gets k logical CPU devices (strategy.py); a notebook on the
same allocation gets the same, before any user code can initialise TensorFlow's devices.
"""

from __future__ import annotations

import os

GPUS_ENV = "PLATFORM_WORKSPACE_GPUS"


def devices_configure() -> None:
    count = int(os.environ.get(GPUS_ENV) or 0)
    if count <= 0:
        return
    from training.devices import logical_cpus_configure, physical_gpus_count

    if physical_gpus_count() == 0:
        logical_cpus_configure(count=count)


def main() -> None:
    devices_configure()
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


if __name__ == "__main__":
    main()
