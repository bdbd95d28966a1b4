"""Task hosts kept warm: Python with TensorFlow already imported, waiting to become one task.

Importing TensorFlow takes seconds, longer than a small trial's first step; a node that keeps one
such host ready starts training sooner than a cold `python train.py` would. Only the import is
done ahead: TF's runtime (devices, TF_CONFIG, logical device layout) initializes after the
hand-off, from the task's own environment, exactly as in a cold start.

    python -m training.supervisor.warm --channel-fd N   # imports TF, then waits for one order on fd N

The order (hosts.py sends it) is one JSON message with the task's events and log files passed
as descriptors: the host points stdout/stderr at the log, takes the task's environment and
working directory, confines itself (confine.py) and runs the task. EOF instead of an order (the
pool closed, or the node died) ends it quietly. A host serves one task of one trial, never more.

`WarmPool` keeps `size` hosts per environment (`TaskPython.key`): the node's own from the start,
an environment's from the first trial that asks for it. A taken host is replaced shortly after
the task it became has ended, so the replacement's import never competes with that trial.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from training.isolation.mounts import mounts_inject
from training.isolation.runtime import Runtime, TaskPython, client_dir, node_privileged
from training.isolation.sandbox import Exposure
from training.supervisor.hosts import Host, host_start

# After the task a warm host became has ended, before its replacement starts importing.
REFILL_DELAY_SECONDS = 2.0
ORDER_MAX_BYTES = 4 * 1024 * 1024
ORDER_POLL_SECONDS = 0.02
CLOSE_GRACE_SECONDS = 2.0


def _order_from_socket(*, channel_fd: int) -> tuple[dict[str, Any], int, int] | None:
    channel = socket.socket(fileno=channel_fd)
    try:
        message, fds, _, _ = socket.recv_fds(channel, ORDER_MAX_BYTES, 2)
    except OSError:
        message, fds = b"", []
    channel.close()
    if not message or len(fds) != 2:
        return None
    return json.loads(message), fds[0], fds[1]


def _order_from_directory(*, channel_dir: str) -> tuple[dict[str, Any], int, int]:
    """A container's channel (containers.py): its order appears there whole, by rename."""
    order_path = Path(channel_dir) / "order.json"
    while not order_path.exists():
        time.sleep(ORDER_POLL_SECONDS)
    order = json.loads(order_path.read_text())
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
    return (order, os.open(Path(channel_dir) / "events.jsonl", flags),
            os.open(Path(channel_dir) / "task.log", flags))


def _serve(*, channel_fd: int | None = None, channel_dir: str | None = None) -> int:
    import training.trial.tfenv  # the whole point: pay for the import before the order

    received = (_order_from_socket(channel_fd=channel_fd) if channel_fd is not None
                else _order_from_directory(channel_dir=str(channel_dir)))
    if received is None:
        # Nothing ran here, so nothing needs tearing down: skipping the interpreter's teardown
        # of TensorFlow (0.8 s here) shortens every stop of a node, which waits for its pool.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    order, events_fd, log_fd = received
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(devnull)
    image_path = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(order["env"])
    if image_path and "PYTHONPATH" not in order["env"]:
        os.environ["PYTHONPATH"] = image_path  # an image's own harness, for what the task spawns
    # The import already asked tempfile for a directory; the task's TMPDIR must win (AutoGraph
    # writes the code it generates there).
    tempfile.tempdir = None
    if scratch := order["env"].get("TMPDIR"):
        os.makedirs(scratch, mode=0o700, exist_ok=True)  # a container's /tmp starts empty
    if order.get("confine"):
        # The import left threads behind (OpenBLAS' pool, TensorFlow's) that Landlock would not
        # cover: the task runs in a fork, this process' only thread, and this one stays its
        # namespace's pid 1 (outside the task's work dir), forwarding signals and handing back
        # its exit code.
        _task_fork()
    os.chdir(order["cwd"])
    if order.get("confine"):
        from training.isolation.landlock import Confinement, confine_apply

        confinement = Confinement.from_dict(order["confine"])
        # An image's own Python lives where its image put it.
        runtime = (sys.base_prefix, sys.prefix, str(Path(training.trial.tfenv.__file__).parent),
                   str(client_dir()))
        confine_apply(confinement=replace(confinement, read=confinement.read + runtime))
    from training.trial.worker import task_main

    return task_main(spec_json=order["spec"], cluster_json=order["cluster"],
                     task_type=order["task_type"], task_index=int(order["task_index"]),
                     events_fd=events_fd)


def _task_fork() -> None:
    """Returns in the child; the parent waits for it and exits as it did, never returning."""
    child = os.fork()
    if child == 0:
        return
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # pid 1 of a namespace gets only the signals it handles; the task decides what they mean.
        signal.signal(signum, lambda number, _frame: _kill_quietly(child, number))
    while True:
        try:
            pid, status = os.wait()  # orphans of the task are reparented here: reap them too
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def _kill_quietly(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


class WarmPool:
    """Up to `size` warm hosts per environment; `take` never waits for one to become ready."""

    def __init__(self, *, size: int, runtime: Runtime, env: dict[str, str], exposure: Exposure,
                 log_dir: Path, python: TaskPython | None = None,
                 refill_delay_seconds: float = REFILL_DELAY_SECONDS,
                 inject: bool | None = None) -> None:
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
                                  mount_points=self.mount_points)
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
            pid = chosen.task_pid()
            try:
                if pid is None:
                    raise OSError("the warm host has no sandbox")
                mounts_inject(pid=pid, write=write, read=read)
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


_pool: WarmPool | None = None


def warm_pool_configure(*, size: int, runtime: Runtime, env: dict[str, str], exposure: Exposure,
                        log_dir: Path) -> WarmPool | None:
    """Set this process's pool (a worker node calls it once at start); size 0 turns it off."""
    global _pool
    if _pool is not None:
        _pool.close()
    _pool = (WarmPool(size=size, runtime=runtime, env=env, exposure=exposure, log_dir=log_dir)
             if size > 0 else None)
    return _pool


def warm_pool() -> WarmPool | None:
    return _pool


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m training.supervisor.warm")
    channel = parser.add_mutually_exclusive_group(required=True)
    channel.add_argument("--channel-fd", type=int)
    channel.add_argument("--channel-dir")
    arguments = parser.parse_args()
    code = _serve(channel_fd=arguments.channel_fd, channel_dir=arguments.channel_dir)
    with contextlib.suppress(OSError):  # a full disk under the log: the code still tells
        sys.stdout.flush()
        sys.stderr.flush()
    # TF's gRPC and collective threads can block interpreter shutdown; the outcome is decided.
    os._exit(code)


if __name__ == "__main__":
    _main()
