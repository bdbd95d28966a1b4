"""CPU accounting of process groups, as the inference benchmark uses it."""

import subprocess
import sys
import time

from bench.cpu import group_seconds, own_seconds, tree_seconds

BUSY = (
    "import time\nend = time.process_time() + 0.6\n"
    "while time.process_time() < end: pass\ntime.sleep(30)\n"
)


def test_a_group_is_charged_for_its_processes_and_nothing_else() -> None:
    # A leader that spends little and a child in its group that spends 0.6 s.
    leader = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {BUSY!r}])\n"
         "time.sleep(30)"],
        start_new_session=True,
    )
    try:
        before = group_seconds(leader.pid)
        time.sleep(2.0)
        spent = group_seconds(leader.pid) - before
        assert 0.3 <= spent <= 1.5
        assert group_seconds(2**22 + 17) == 0.0  # no such group
    finally:
        subprocess.run(["pkill", "-g", str(leader.pid)], check=False)
        leader.wait()


def test_own_seconds_counts_this_process() -> None:
    before = own_seconds()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert own_seconds() - before >= 0.05


def test_a_tree_is_charged_for_descendants_that_left_its_group() -> None:
    # A leader that spends little and a grandchild in a session of its own (as Ray's actors)
    # that spends 0.6 s.
    spawn = (f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {BUSY!r}], "
             "start_new_session=True)\nimport time\ntime.sleep(30)\n")
    leader = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {spawn!r}])\n"
         "time.sleep(30)"],
        start_new_session=True,
    )
    try:
        before = tree_seconds(leader.pid)
        time.sleep(2.0)
        spent = tree_seconds(leader.pid) - before
        assert 0.3 <= spent <= 1.5
        assert group_seconds(leader.pid) - before < 0.3  # the group alone misses it
        assert tree_seconds(2**22 + 17) == 0.0  # no such process
    finally:
        middle = subprocess.run(["pgrep", "-P", str(leader.pid)], capture_output=True,
                                text=True, check=False).stdout.split()
        for pid in middle:  # the grandchild left the group: killed as its parent's child
            subprocess.run(["pkill", "-9", "-P", pid], check=False)
        subprocess.run(["pkill", "-g", str(leader.pid)], check=False)
        leader.wait()
