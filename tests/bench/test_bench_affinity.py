"""Pinning a process tree, every thread of it, for item 2's side-by-side runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.affinity import cpus_available, process_tree, processes_pin

TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def threads_affinity(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(len(cpus_available()) < 2, reason="pinning to one of two CPUs needs two")
def test_a_tree_is_pinned_thread_by_thread_and_released() -> None:
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert set(process_tree([parent.pid])) == {parent.pid, child}
        everything = cpus_available()
        one = {min(everything)}
        processes_pin(process_tree([parent.pid]), cpus=one)
        assert len(threads_affinity(parent.pid)) >= 2  # the sleeping thread is pinned too
        assert all(cpus == one for cpus in threads_affinity(parent.pid))
        assert all(cpus == one for cpus in threads_affinity(child))
        processes_pin(process_tree([parent.pid]), cpus=everything)
        assert all(cpus == everything for cpus in threads_affinity(child))
    finally:
        for pid in process_tree([parent.pid])[1:]:
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def test_an_unknown_pid_is_skipped() -> None:
    processes_pin([2**22 + 1], cpus=cpus_available())  # no such process: nothing to do
    assert process_tree([2**22 + 1]) == [2**22 + 1]
