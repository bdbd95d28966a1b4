"""CPU accounting of process groups, as the inference benchmark uses it."""

import subprocess
import sys
import time

from bench.cpu import group_seconds, own_seconds

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
