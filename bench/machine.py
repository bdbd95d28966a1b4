"""What a benchmark ran on, stated beside every result: machine, package versions, commit."""

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from training.isolation.runtime import DEFAULT_RUNTIME

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "tensorflow", "tf-keras", "tensorflow-serving-api", "Django", "djangorestframework", "celery",
    "kombu", "redis", "gunicorn", "grpcio", "psycopg",
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def machine_describe() -> str:
    return (
        f"{os.cpu_count()} cores ({cpu_model()}), {memory_gib():.0f} GiB, "
        f"{platform.platform()}; trial runtime: {trial_runtime_describe()}"
    )


def trial_runtime_describe() -> str:
    # The stack's worker node reads the same variable (bench/stack.py passes the environment on).
    name = os.environ.get("PLATFORM_TRIAL_RUNTIME", DEFAULT_RUNTIME)
    return {"sandbox": "sandbox (bubblewrap + Landlock)",
            "podman": "podman (a container per task, + Landlock)",
            "docker": "docker (a container per task, + Landlock)",
            "process": "process (no isolation)"}.get(name, name)


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # The results this run writes are not changes to what was measured.
    changed = git("status", "--porcelain", "--", ".", ":(exclude)bench/results")
    return f"{commit}+uncommitted changes" if changed else commit


def versions_describe() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return f"Python {sys.version.split()[0]}, " + ", ".join(found) + f"; platform {git_commit()}"
