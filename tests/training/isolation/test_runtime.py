"""The sandbox check a node runs at start, on a machine whose mounts come and go."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from training.isolation.runtime import repo_root

# A node also running podman sees container overlays mounted and unmounted at any moment. The
# check once bound all of `/` recursively, and one overlay gone mid-bind failed the node's start
# (bwrap: "Unable to apply mount flags: remount …/merged: No such file or directory").
CHURN = textwrap.dedent(
    """
    import subprocess, sys, threading
    from training.isolation.runtime import runtime_sandbox_check

    base = sys.argv[1]
    # Shared within this namespace, as a host's mounts are, so a sandbox's copy of it sees
    # each unmount below it, as it would see a container's overlay go.
    subprocess.run(["mount", "-t", "tmpfs", "base", base], check=True)
    subprocess.run(["mount", "--make-shared", base], check=True)
    target = base + "/overlay"
    subprocess.run(["mkdir", target], check=True)
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            subprocess.run(["mount", "-t", "tmpfs", "churn", target], check=True)
            subprocess.run(["umount", target], check=True)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(200):
            runtime_sandbox_check(gang_subnet="")
    finally:
        stop.set()
        thread.join()
    """
)


@pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true",
                    reason="mounting needs root (CI runs as root)")
def test_the_check_holds_while_other_mounts_come_and_go(tmp_path: Path) -> None:
    assert shutil.which("unshare") and shutil.which("bwrap"), "make sandbox installs bubblewrap"
    base = tmp_path / "containers"
    base.mkdir()
    # A mount namespace of its own, so the churn never touches the machine's mounts.
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private",
         sys.executable, "-c", CHURN, str(base)],
        cwd=repo_root(), env={**os.environ, "PYTHONPATH": str(repo_root())},
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
