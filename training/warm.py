"""Warm trial processes: Python with TensorFlow already imported, waiting to become a task.

Importing TensorFlow takes seconds, longer than a small trial's first step; a node that keeps one
such process ready starts training sooner than a cold `python train.py` would. Only the import is
done ahead: TF's runtime (devices, TF_CONFIG, logical device layout) initializes after the hand-off,
from the task's own environment, exactly as in a cold start.

    python -m training.warm        # imports TF, then waits for one order on stdin

The order is one JSON line: {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}; the process
then redirects stdout/stderr to `log` and runs `training.worker.main(argv)` as if started with
those arguments. EOF instead of an order (the pool closed, or the node died) ends it quietly.

`WarmPool` (in the supervising process) hands them out and replaces each one taken shortly after
the task it became has ended, so the replacement's import (seconds of CPU) never competes with the
trial it just served.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

# After the task a warm process became has ended, before its replacement starts importing.
REFILL_DELAY_SECONDS = 2.0


def _serve(stdin: IO[str]) -> int:
    import training.tfenv  # noqa: F401 - the whole point: pay for the import before the order

    line = stdin.readline()
    if not line.strip():
        # Nothing ran here, so nothing needs tearing down: skipping the interpreter's teardown
        # of TensorFlow (0.8 s here) shortens every stop of a node, which waits for its pool.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    order = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["env"])
    from training.worker import main

    return main(list(order["argv"]))


class WarmPool:
    """Up to `size` warm processes of this node; `take` never waits for one to become ready."""

    def __init__(self, *, size: int, env: dict[str, str], log_dir: Path,
                 refill_delay_seconds: float = REFILL_DELAY_SECONDS) -> None:
        self.size, self.env, self.log_dir = size, env, log_dir
        self.refill_delay = refill_delay_seconds
        self._ready: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._spawned = 0
        log_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(size):
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            if self._closed or len(self._ready) >= self.size:
                return
            self._spawned += 1
            with (self.log_dir / f"warm-{self._spawned % 10}.log").open("wb") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "training.warm"], cwd=self.log_dir, env=self.env,
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,  # like a cold task: its own session for killpg
                )
            self._ready.append(process)

    def take(self, *, argv: list[str], env: dict[str, str], cwd: Path,
             log: Path) -> subprocess.Popen[bytes] | None:
        """A warm process now running `training.worker` with these arguments, or None."""
        with self._lock:
            alive = [p for p in self._ready if p.poll() is None]
            for dead in set(self._ready) - set(alive):
                dead.wait()
            process = alive.pop(0) if alive else None
            self._ready = alive
        if process is None:
            return None
        order = {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}
        try:
            assert process.stdin is not None
            process.stdin.write((json.dumps(order) + "\n").encode())
            process.stdin.close()
        except (BrokenPipeError, OSError):
            process.wait()
            return None
        threading.Thread(target=self._refill_after, args=(process,), name="warm-refill",
                         daemon=True).start()
        return process

    def _refill_after(self, process: subprocess.Popen[bytes]) -> None:
        # The supervisor polls the same process; Popen lets both wait for it.
        process.wait()
        time.sleep(self.refill_delay)  # the task's own clean-up and the outcome come first
        self._spawn()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
        for process in ready:
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()  # EOF: it exits on its own
        for process in ready:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


_pool: WarmPool | None = None


def warm_pool_configure(*, size: int, env: dict[str, str], log_dir: Path) -> WarmPool | None:
    """Set this process's pool (a worker node calls it once at start); size 0 turns it off."""
    global _pool
    if _pool is not None:
        _pool.close()
    _pool = WarmPool(size=size, env=env, log_dir=log_dir) if size > 0 else None
    return _pool


def warm_pool() -> WarmPool | None:
    return _pool


if __name__ == "__main__":
    sys.exit(_serve(sys.stdin))
