"""What a benchmark ran on, stated beside every result."""

import os
import platform
import sys
from importlib import metadata


def machine_describe() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("celery", "kombu", "redis", "Django")
    )
    return (
        f"{os.cpu_count()} cores, {memory:.0f} GiB, {platform.platform()}, "
        f"Python {sys.version.split()[0]}; {versions}"
    )
