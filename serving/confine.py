"""Landlock for the embedded model server: once started, it reads only its models.

A SavedModel is a program: the graph check (graph_check.py) refuses file and Python ops, and
this is what holds when one slips through (an op an operator allowed, a kernel bug): the server
process, and every thread, can then read only the model base path, its own flag files and the
Python runtime; write nothing but a few device nodes; bind only its own ports and connect
nowhere. The repository it runs from, the platform's var/ (database, secret key, uploads) and
every trial's work dir are out of its reach. tensorflow/serving in compose gets the same from
its container (a volume of models and nothing else).
"""

from __future__ import annotations

import contextlib
import os
import signal
import site
import sys
import sysconfig
from pathlib import Path

# Shared libraries, the dynamic loader's cache, time zones and CA certificates.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/etc")
# What TensorFlow and gRPC read of the process and the machine (thread counts, memory).
PROCESS_READ = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
                "/sys/devices/system/cpu", "/sys/fs/cgroup")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
# TCP port rules arrived in Landlock ABI 4.
MINIMUM_ABI = 4


def confined_fork() -> None:
    """Returns in a child, single-threaded; the parent stays behind to forward SIGTERM and
    SIGINT and to exit as the child did, never returning."""
    child = os.fork()
    if child == 0:
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: _forward(child, number))
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def runtime_read_paths() -> tuple[str, ...]:
    """The interpreter, its standard library and site-packages, and this package: never the
    folder it was run from, which holds the platform's own data."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages(),
             *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                      "platlib"))}
    paths.add(str(Path(__file__).resolve().parent))
    return tuple(sorted(p for p in paths if p and os.path.exists(p)))


def server_confine(*, read: tuple[str, ...], ports: tuple[int, ...],
                   write: tuple[str, ...] = ()) -> None:
    """Restricts this process for good: `read` (models, flag files) beside the runtime, `write`
    (the profiler's trace directory, if any) and TCP binds only on `ports` (no connect at all).
    Raises where the kernel cannot."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, abi_version, fs_for_abi

    # landlock_restrict_self binds the calling thread only; any other would stay unconfined.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise OSError(f"The model server must confine itself with one thread, not {threads}.")
    abi = int(abi_version())
    if abi < MINIMUM_ABI:
        raise OSError(f"Landlock ABI {abi} cannot confine the model server ({MINIMUM_ABI}+ "
                      "needed); start it without --confine_read_paths to serve unconfined.")
    everything = fs_for_abi(abi)
    reading = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
    device = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV
    # From ABI 6: no signals to, and no abstract sockets of, processes outside it.
    scoped = Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET if abi >= 6 else Scope.NONE
    with Ruleset(handled_fs=everything, handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                 scoped=scoped) as ruleset:
        for path in (*SYSTEM_READ, *PROCESS_READ, *runtime_read_paths(), *read):
            if os.path.exists(path):
                file_rights = AccessFS.READ_FILE | AccessFS.EXECUTE
                ruleset.allow_path(path, reading if os.path.isdir(path) else file_rights)
        for path in write:
            os.makedirs(path, exist_ok=True)
            ruleset.allow_path(path, everything & ~AccessFS.EXECUTE)
        for path in DEVICES:
            if os.path.exists(path):
                ruleset.allow_path(path, device)
        for port in sorted({p for p in ports if p}):
            ruleset.allow_port(port, AccessNet.BIND_TCP)
        ruleset.restrict()
