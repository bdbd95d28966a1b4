"""Landlock for the embedded model server: once started, it reads only its models.

A SavedModel is a program: the graph check (graph_check.py) refuses file and Python ops, and
this is what holds when one slips through (an op an operator allowed, a kernel bug): the server
process, and every thread, can then read only the model base path, its own flag files and the
Python runtime; write nothing but a few device nodes; bind only its own ports and connect
nowhere. The repository it runs from, the platform's var/ (database, secret key, uploads) and
every trial's work dir are out of its reach. tensorflow/serving in compose gets the same from
its container (a volume of models and nothing else). The ruleset itself is the platform's one
(`confinement/`); this module says what the server may touch.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

import confinement
from confinement import TCP_PORTS_ABI, Confinement, ConfinementError, abi_probe, confine_apply

# Shared libraries, the dynamic loader's cache, time zones and CA certificates.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/etc")
# What TensorFlow and gRPC read of the process and the machine (thread counts, memory).
PROCESS_READ = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
                "/sys/devices/system/cpu", "/sys/fs/cgroup")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
# Binding only its own ports, and connecting nowhere, is the point: TCP port rules are needed.
MINIMUM_ABI = TCP_PORTS_ABI


def runtime_read_paths() -> tuple[str, ...]:
    """The interpreter, its standard library and site-packages, this package and the one that
    confines it: never the folder it was run from, which holds the platform's own data."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *site.getsitepackages(), site.getusersitepackages(),
             *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                      "platlib"))}
    paths.add(str(Path(__file__).resolve().parent))
    paths.add(str(Path(confinement.__file__).resolve().parent))
    return tuple(sorted(p for p in paths if p and os.path.exists(p)))


def server_confine(*, read: tuple[str, ...], ports: tuple[int, ...],
                   write: tuple[str, ...] = ()) -> None:
    """Restricts this process for good: `read` (models, flag files) beside the runtime, `write`
    (the profiler's trace directory, if any) and TCP binds only on `ports` (no connect at all).
    Raises OSError where the kernel cannot."""
    for path in write:
        os.makedirs(path, exist_ok=True)
    rules = Confinement(read=(*SYSTEM_READ, *PROCESS_READ, *runtime_read_paths(), *read),
                        write_data=write, devices=DEVICES, bind_ports=ports, abi=abi_probe())
    try:
        confine_apply(confinement=rules, minimum_abi=MINIMUM_ABI)
    except ConfinementError as error:
        raise OSError(f"The model server cannot confine itself: {error} Start it without "
                      "--confine_read_paths to serve unconfined.") from error
