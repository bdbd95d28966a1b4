"""A closure of pinned packages installed by hash: resolved first, then installed from the lock
that resolution wrote, every wheel with its sha256 (`pip --require-hashes --no-deps`).

    closure_install(pip=[python, "-m", "pip", "install", ...], packages=["pyjokes==0.8.3"],
                    lock=venv / "requirements.lock", run=run)

Used for an environment's venv on the node (environments.py) and inside a derived image's build
(images.py ships this file and errors.py into the build and runs it with the image's own
Python): it imports nothing but the standard library and `training.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from training.errors import InvalidInput

REPORT_FILE = "resolution.json"


def closure_install(*, pip: Sequence[str], packages: Sequence[str], lock: Path,
                    run: Callable[[list[str]], None]) -> None:
    """`pip` is an `install` command line with its options; `run` runs one, raising on
    failure. The lock (and pip's report beside it) stays, saying what was installed."""
    report = lock.with_name(REPORT_FILE)
    run([*pip, "--dry-run", "--quiet", "--report", str(report), *packages])
    lock.write_text(lock_from_report(report=report), encoding="utf-8")
    run([*pip, "--require-hashes", "--no-deps", "-r", str(lock)])


def lock_from_report(*, report: Path) -> str:
    """pip's installation report as a requirements file with a sha256 for every package."""
    lines = []
    for item in json.loads(report.read_text(encoding="utf-8")).get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        archive = item.get("download_info", {}).get("archive_info", {})
        digest = archive.get("hashes", {}).get("sha256") or archive.get(
            "hash", "").removeprefix("sha256=")
        if not digest:
            raise InvalidInput(f"The package index gave no sha256 for {name} {version}.")
        lines.append(f"{name}=={version} --hash=sha256:{digest}\n")
    return "".join(sorted(lines))


def lock_requirements(*, lock: Path) -> list[str]:
    """The `name==version` of each package a lock installed, without its hash."""
    return [line.split()[0] for line in lock.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
