"""Task hosts: `python -m training.trial.host` processes, sandboxed or not, each becoming one
task.

    host = host_start(runtime=..., python=..., env=..., exposure=..., log=...)
    host.hand(order={...}, events=path, log=path)   # the task starts
    host.terminate() / host.kill() / host.poll()

Under `docker` and `podman` a host is a container instead (containers.py), with the same methods.

The order travels over a private socketpair (never a pipe another process of the same uid could
open through /proc): one JSON message, with the task's events and log files as passed file
descriptors. The task writes only to those, so it cannot reach the supervisor's other files, and
nothing it writes is read as another trial's.

Under the sandbox the host is the pid namespace's pid 1 (`--as-pid-1`): a SIGKILL to it ends
the namespace, and with it anything user code forked, double forks included.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from training.isolation.containers import container_host_start
from training.isolation.dataset_mounts import mounts_open
from training.isolation.runtime import Runtime, TaskPython, node_privileged
from training.isolation.sandbox import (
    NETWORK_GANG,
    NETWORK_HOST,
    NETWORK_OWN,
    Exposure,
    netns_ref,
    netns_ref_fds,
    sandbox_command,
)
from training.isolation.seccomp import seccomp_memfd
from training.supervisor.forks import ForkServer, fork_server


class TaskHost:
    forked = False

    def __init__(self, *, process: subprocess.Popen[bytes], channel: socket.socket,
                 python: TaskPython, sandboxed: bool, exposure: Exposure, network: str) -> None:
        self.process, self.channel, self.python = process, channel, python
        self.sandboxed, self.exposure, self.network = sandboxed, exposure, network
        self._task_pid: int | None = None
        self._netns_fd: int | None = None
        self._userns_fd: int | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def network_ref(self) -> str:
        """What another task of the same gang on this node joins: this sandbox's own network
        namespace, held by a descriptor (a pid could be reused by another process)."""
        if not self.sandboxed or self.network not in (NETWORK_OWN, NETWORK_GANG):
            return self.network if self.sandboxed else NETWORK_HOST
        if self._netns_fd is None:
            self._netns_fd = _netns_open(host=self)
        if node_privileged():
            return netns_ref(net=f"/proc/self/fd/{self._netns_fd}")
        if self._userns_fd is None:
            # The one that owns the network namespace (bwrap nests another for its devpts).
            self._userns_fd = fcntl.ioctl(self._netns_fd, NS_GET_USERNS)
        return netns_ref(net=f"/proc/self/fd/{self._netns_fd}",
                         user=f"/proc/self/fd/{self._userns_fd}")

    def poll(self) -> int | None:
        code = self.process.poll()
        if code is not None:
            self._netns_close()
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = self.process.wait(timeout=timeout)
        self._netns_close()
        return code

    def _netns_close(self) -> None:
        for fd in (self._netns_fd, self._userns_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._netns_fd = self._userns_fd = None

    def hand(self, *, order: dict[str, Any], events: Path, log: Path) -> bool:
        """Sends the task; False when the host died waiting (the caller starts another)."""
        fds = [_open_for_task(events), _open_for_task(log)]
        try:
            with self._lock:
                if self.process.poll() is not None:
                    return False
                try:
                    socket.send_fds(self.channel, [json.dumps(order).encode()], fds)
                except OSError:
                    return False
                finally:
                    self.channel.close()
        finally:
            for fd in fds:
                os.close(fd)
        return True

    def close(self) -> None:
        """No order will come: the host exits on its own (EOF on its channel)."""
        with self._lock:
            self.channel.close()

    def task_pid(self) -> int | None:
        """The host's own pid outside the sandbox: bwrap's child, the namespace's pid 1."""
        if not self.sandboxed:
            return self.process.pid
        if self._task_pid is None:
            path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
            try:
                children = path.read_text().split()
            except OSError:
                return None
            self._task_pid = int(children[0]) if children else None
        return self._task_pid

    def terminate(self) -> None:
        """SIGTERM to the task itself: it checkpoints and stops at the next safe point."""
        pid = self.task_pid()
        if pid is not None:
            _kill(pid, signal.SIGTERM)

    def kill(self) -> None:
        """Everything the task started goes with it."""
        if self.sandboxed:
            pid = self.task_pid()
            if pid is not None:
                _kill(pid, signal.SIGKILL)  # pid 1 of its namespace: the kernel ends the rest
            _kill(self.process.pid, signal.SIGKILL)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)  # its session: user code's children


class ForkedHost(TaskHost):
    """A sandbox around trial/holder.py whose task the fork server makes at `hand`."""

    forked = True

    def __init__(self, *, server: ForkServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server = server

    def hand(self, *, order: dict[str, Any], events: Path, log: Path) -> bool:
        fds = [_open_for_task(events), _open_for_task(log)]
        try:
            with self._lock:
                try:
                    return self._fork(order=order, fds=fds)
                finally:
                    self.channel.close()  # the holder exits on its own if nothing was sent
        finally:
            for fd in fds:
                os.close(fd)

    def _fork(self, *, order: dict[str, Any], fds: list[int]) -> bool:
        self.channel.settimeout(HOLDER_READY_SECONDS)
        try:
            ready = self.channel.recv(16)
        except OSError:
            ready = b""
        # Only once the holder runs is the sandbox whole (bubblewrap execs it last): joined any
        # sooner, its mounts could still be the node's.
        pid = self.task_pid() if ready == b"ready" else None
        if pid is None or self.process.poll() is not None:
            return False
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            # The descriptor is the holder's only if the pid is still bubblewrap's child now.
            if self.process.poll() is not None or not _child_of(parent=self.process.pid,
                                                               pid=pid):
                return False
            return self.server.fork(order=order, holder_pid=pid,
                                    fds=[pidfd, self.channel.fileno(), *fds])
        finally:
            os.close(pidfd)


def _child_of(*, parent: int, pid: int) -> bool:
    path = Path(f"/proc/{parent}/task/{parent}/children")
    with contextlib.suppress(OSError):
        return str(pid) in path.read_text().split()
    return False


HOLDER_READY_SECONDS = 30.0
NETNS_WAIT_SECONDS = 10.0
NS_GET_USERNS = 0xB701  # ioctl(2) on a namespace: a descriptor of the user namespace owning it


def _netns_open(*, host: TaskHost) -> int:
    """The sandbox's network namespace, once bwrap has made it (never the node's own) and
    mapped its users: a node not run as root that joined the user namespace owning it before
    bwrap wrote its uid map would have no uid there, and could not nest its own sandbox."""
    deadline = time.monotonic() + NETNS_WAIT_SECONDS
    own = os.stat("/proc/self/ns/net").st_ino
    while time.monotonic() < deadline:
        pid = host.task_pid()
        if pid is not None:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            if (os.fstat(fd).st_ino != own and _users_mapped(pid=pid)
                    and host.process.poll() is None):
                return fd
            os.close(fd)
        elif host.process.poll() is not None:
            break
        time.sleep(0.01)
    raise OSError("The gang's first task ended before its network could be shared.")


def _users_mapped(*, pid: int) -> bool:
    """Whether the task's user namespace has its uid map; the one owning its network is mapped
    before it, since a nested one is made by a user mapped there."""
    try:
        return bool(Path(f"/proc/{pid}/uid_map").read_text().strip())
    except OSError:
        return False


def _open_for_task(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)


def _kill(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


class Host(Protocol):
    """What the supervisor and the warm pool use of a task host, whatever the runtime."""

    python: TaskPython
    exposure: Exposure
    sandboxed: bool
    forked: bool  # its task made by the fork server (forks.py)

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def network_ref(self) -> str: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def hand(self, *, order: dict[str, Any], events: Path, log: Path) -> bool: ...
    def close(self) -> None: ...
    def task_pid(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def host_start(*, runtime: Runtime, python: TaskPython, env: dict[str, str], exposure: Exposure,
               log: Path, cwd: Path, network: str = "none", network_alias: str = "",
               labels: dict[str, str] | None = None, gpus: tuple[int, ...] = (),
               slots: int = 1, mount_points: tuple[str, ...] = (), forked: bool = True) -> Host:
    """A task host. `network`: "none" (one of its own), "host" (the node's: a gang across
    nodes), or another task's `network_ref`. `labels`, `gpus` and `slots` (the node's slots it
    holds, which size its memory and CPU weight) matter to containers only (a sandbox sees GPUs
    as device nodes and has no per-task limits). `mount_points`: where a warm container's root,
    read-only, has empty folders for its task's to be mounted onto (a sandbox needs none).
    `forked`: the task forked from this process' fork server (forks.py) where there is one;
    False for a cold host always (the pool's warm hosts, a retry after the server failed)."""
    if runtime.containers is not None:

        channel = log.parent / f"{log.stem}.{uuid.uuid4().hex[:12]}.channel"
        return container_host_start(settings=runtime.containers, engine=runtime.name,
                                    python=python, env=env, exposure=exposure, log=log,
                                    channel=channel, network=network,
                                    network_alias=network_alias, labels=labels, gpus=gpus,
                                    slots=slots, mount_points=mount_points)
    # A root missing now is not mounted (bwrap's -try binds), so the host must not claim it.
    exposure = replace(exposure, write=tuple(p for p in exposure.write if os.path.isdir(p)),
                       read=tuple(p for p in exposure.read if os.path.exists(p)))
    # A dataset's folders, opened now with no link followed (InvalidInput if one became a link).
    pins = mounts_open(paths=exposure.pinned, roots=exposure.pin_roots) if runtime.isolated \
        else {}
    server = fork_server(runtime=runtime, python=python, env=env) if forked else None
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    entry = [python.executable, "-m", "training.trial.host", "--channel-fd", str(child.fileno())]
    if server is not None:
        # `-S`: the holder needs the standard library alone, and starts in milliseconds.
        entry = [python.executable, "-S", "-P", "-m", "training.trial.holder",
                 "--channel-fd", str(child.fileno())]
    passed = [child.fileno(), *pins.values()]
    argv = entry
    seccomp = seccomp_memfd() if runtime.isolated else -1
    try:
        if runtime.isolated:
            passed.append(seccomp)
            passed += netns_ref_fds(network)  # the gang's namespace, for nsenter
            argv = sandbox_command(python=python, exposure=exposure, seccomp_fd=seccomp,
                                   network=network, pinned_fds=pins) + entry
        with log.open("ab") as output:
            process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, pass_fds=tuple(passed),
                # Its own session, so a kill of the group reaches all a plain process started.
                start_new_session=True,
            )
    except BaseException:
        parent.close()
        raise
    finally:
        child.close()
        for fd in pins.values():
            os.close(fd)
        if runtime.isolated:
            os.close(seccomp)
    if server is not None:
        return ForkedHost(server=server, process=process, channel=parent, python=python,
                          sandboxed=True, exposure=exposure, network=network)
    return TaskHost(process=process, channel=parent, python=python, sandboxed=runtime.isolated,
                    exposure=exposure, network=network)
