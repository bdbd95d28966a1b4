"""Task hosts kept warm: Python with TensorFlow already imported, waiting to become one task.

Importing TensorFlow takes seconds, longer than a small trial's first step; a node that keeps one
such host ready starts training sooner than a cold `python train.py` would. Only the import is
done ahead: TF's runtime (devices, TF_CONFIG, logical device layout) initializes after the
hand-off, from the task's own environment, exactly as in a cold start.

A host is `python -m training.trial.host` (trial/host.py), started by supervisor/hosts.py; it
serves one task of one trial, never more.

`WarmPool` keeps `size` hosts per environment (`TaskPython.key`): the node's own from the start,
an environment's from the first trial that asks for it. A taken host is replaced shortly after
the task it became has ended, so the replacement's import never competes with that trial; and it
imports at idle priority (priority.py), so it never competes with another trial of the node.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path

from training.isolation.mounts import mounts_inject, mounts_settled
from training.isolation.runtime import Runtime, TaskPython, node_privileged
from training.isolation.sandbox import Exposure
from training.supervisor.hosts import Host, host_start
from training.supervisor.priority import spawner_idle, tree_normal

# A host joins the pool as soon as it is started, while its sandbox may still be setting up: a take
# that comes that soon waits for it this long, then starts the task cold instead.
SETTLE_SECONDS = 10.0
# After the task a warm host became has ended, before its replacement starts importing.
REFILL_DELAY_SECONDS = 2.0
ORDER_MAX_BYTES = 4 * 1024 * 1024
ORDER_POLL_SECONDS = 0.02
CLOSE_GRACE_SECONDS = 2.0


class WarmPool:
    """Up to `size` warm hosts per environment; `take` never waits for one to become ready."""

    def __init__(self, *, size: int, runtime: Runtime, env: dict[str, str], exposure: Exposure,
                 log_dir: Path, python: TaskPython | None = None,
                 refill_delay_seconds: float = REFILL_DELAY_SECONDS,
                 inject: bool | None = None, idle: bool = True) -> None:
        self.runtime, self.env = runtime, env
        # Where the node can mount a task's folders into a waiting sandbox or container
        # (mounts.py: a node run as root), a warm host starts with no one's data at all;
        # elsewhere there are none (a cold host per task), since one would hold every tenant's.
        containers = runtime.containers is not None
        self.inject = (runtime.isolated and node_privileged()) if inject is None else inject
        self.size = 0 if runtime.isolated and not self.inject else size
        self.exposure = Exposure() if self.inject else exposure
        # A container's root is read-only: the data roots are empty tmpfs folders in it, where
        # the node makes a task's mount points (a sandbox's root is its own tmpfs).
        self.mount_points = tuple(dict.fromkeys(exposure.write + exposure.read)) \
            if self.inject and containers else ()
        self.log_dir, self.refill_delay = log_dir, refill_delay_seconds
        # Only where a taken host can be set back to normal: a node that injects is root.
        self.idle = idle and self.inject
        self._ready: dict[str, list[Host]] = {}
        self._pythons: dict[str, TaskPython] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._spawned = 0
        self._orders: queue.Queue[TaskPython | None] = queue.Queue()
        log_dir.mkdir(parents=True, exist_ok=True)
        # One long-lived thread starts every host: bwrap's --die-with-parent follows the thread
        # that forked it, and a refill thread ends right after its spawn.
        self._spawner = threading.Thread(target=self._spawn_loop, name="warm-spawner",
                                         daemon=True)
        self._spawner.start()
        self._want(python or TaskPython())

    def _want(self, python: TaskPython) -> None:
        with self._lock:
            if python.key in self._pythons:
                return
            self._pythons[python.key] = python
            self._ready[python.key] = []
        for _ in range(self.size):
            self._orders.put(python)

    def _spawn_loop(self) -> None:
        if self.idle:
            # Hosts import at idle priority: a refill never slows a trial that trains meanwhile.
            # A taken host is set back to normal (take); only a node that may do so does this.
            spawner_idle()
        while (python := self._orders.get()) is not None:
            with self._lock:
                if self._closed or len(self._ready[python.key]) >= self.size:
                    continue
                self._spawned += 1
                number = self._spawned
            try:
                host = host_start(runtime=self.runtime, python=python, env=self.env,
                                  exposure=self.exposure, cwd=self.log_dir,
                                  log=self.log_dir / f"warm-{number % 10}.log",
                                  mount_points=self.mount_points, forked=False)
            except OSError:  # an engine's refusal too (docker-py's errors are OSErrors)
                continue  # the next take starts cold; the node stays usable
            with self._lock:
                if self._closed:
                    host.close()
                else:
                    self._ready[python.key].append(host)

    def ready_pids(self, *, python: TaskPython | None = None) -> list[int]:
        key = (python or TaskPython()).key
        with self._lock:
            return [h.pid for h in self._ready.get(key, []) if h.poll() is None]

    def take(self, *, python: TaskPython, write: tuple[str, ...],
             read: tuple[str, ...]) -> Host | None:
        """A warm host of this environment showing these paths (mounted into it now, where the
        pool injects them), or None (start cold)."""
        self._want(python)
        with self._lock:
            hosts = self._ready.get(python.key, [])
            alive = [h for h in hosts if h.poll() is None]
            chosen = next((h for h in alive
                           if self.inject or h.exposure.covers(write=write, read=read)), None)
            if chosen is not None:
                alive.remove(chosen)
            self._ready[python.key] = alive
        if chosen is None:
            return None
        threading.Thread(target=self._refill_after, args=(chosen,), name="warm-refill",
                         daemon=True).start()
        if self.inject:
            pid = host_settled_pid(chosen, seconds=SETTLE_SECONDS)
            try:
                if pid is None:
                    raise OSError("the warm host's sandbox did not set up")
                mounts_inject(pid=pid, write=write, read=read)
                if self.idle:
                    tree_normal(pid=chosen.pid)  # the task runs at normal priority, never idle
            except OSError:
                chosen.kill()  # it ran nothing; the task starts cold
                return None
        return chosen

    def _refill_after(self, host: Host) -> None:
        host.wait()  # the supervisor polls the same process; Popen lets both wait for it
        time.sleep(self.refill_delay)  # the task's own clean-up and the outcome come first
        self._orders.put(host.python)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready = [h for hosts in self._ready.values() for h in hosts]
            self._ready = {key: [] for key in self._ready}
        self._orders.put(None)
        for host in ready:
            host.close()  # EOF: a host past its import exits on its own
        deadline = time.monotonic() + CLOSE_GRACE_SECONDS
        for host in ready:
            try:
                host.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                host.kill()  # still importing: it has run nothing, so nothing is lost
                host.wait()


def host_settled_pid(host: Host, *, seconds: float) -> int | None:
    """The host's sandbox pid once the sandbox stands in its own root (None: not within
    `seconds`, or the host is gone)."""
    deadline = time.monotonic() + seconds
    while host.poll() is None:
        pid = host.task_pid()
        if pid is not None and mounts_settled(pid=pid):
            return pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
    return None


_pool: WarmPool | None = None


def warm_pool_configure(*, size: int, runtime: Runtime, env: dict[str, str], exposure: Exposure,
                        log_dir: Path, idle: bool = True) -> WarmPool | None:
    """Set this process's pool (a worker node calls it once at start); size 0 turns it off."""
    global _pool
    if _pool is not None:
        _pool.close()
    _pool = (WarmPool(size=size, runtime=runtime, env=env, exposure=exposure, log_dir=log_dir,
                      idle=idle) if size > 0 else None)
    return _pool


def warm_pool() -> WarmPool | None:
    return _pool
