"""Fork-then-confine: the child carries on alone, the parent forwards signals and exits as the
child did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys, time
from confinement import confined_fork

reap = sys.argv[1] == "reap"
confined_fork(reap_orphans=reap)
signal.signal(signal.SIGTERM, lambda *_: os._exit(42))
print(os.getpid(), flush=True)
if sys.argv[2] == "exit":
    os._exit(7)
time.sleep(60)
"""


def _start(*, reap: bool, then: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, "reap" if reap else "wait", then],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_parent_exits_as_the_child_did() -> None:
    for reap in (False, True):
        process = _start(reap=reap, then="exit")
        assert process.stdout is not None
        child = int(process.stdout.readline())
        assert child != process.pid
        assert process.wait(timeout=30) == 7


def test_a_signal_to_the_parent_reaches_the_child() -> None:
    process = _start(reap=False, then="sleep")
    assert process.stdout is not None
    process.stdout.readline()  # the child's handler is set before it prints
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 42
