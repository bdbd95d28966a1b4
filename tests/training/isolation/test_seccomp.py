"""The seccomp filter under every task: the same refusals in a bubblewrap sandbox and in a task
container of either engine API, while what a trial needs (TCP, UDP, Unix sockets, the route
netlink that name resolution asks) still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from training.isolation.container_create import BindMount, ContainerRequest, container_create
from training.isolation.containers import (
    LABEL_NODE,
    RUNTIME_IMAGE,
    ContainerSettings,
    runtime_image_ensure,
)
from training.isolation.runtime import TaskPython
from training.isolation.sandbox import Exposure, sandbox_command
from training.isolation.seccomp import seccomp_memfd, seccomp_profile_write

PROBE = r"""
import ctypes, errno, json, os, socket

def attempt(action):
    try:
        action()
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    return "allowed"

def open_socket(*args):
    return lambda: socket.socket(*args).close()

def syscall(number, *args):
    def call():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(number, *args) == -1:
            raise OSError(ctypes.get_errno(), "refused")
    return call

def link():
    os.symlink("/etc/passwd", "/tmp/planted")

def thread_and_child():
    import subprocess, threading
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    subprocess.run(["/usr/bin/true"], check=True)

print(json.dumps({
    "tcp": attempt(open_socket(socket.AF_INET, socket.SOCK_STREAM)),
    "udp": attempt(open_socket(socket.AF_INET, socket.SOCK_DGRAM)),
    "tcp6": attempt(open_socket(socket.AF_INET6, socket.SOCK_STREAM)),
    "unix": attempt(open_socket(socket.AF_UNIX, socket.SOCK_STREAM)),
    "netlink route": attempt(open_socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
    "mptcp": attempt(open_socket(socket.AF_INET, socket.SOCK_STREAM, 262)),
    "mptcp6": attempt(open_socket(socket.AF_INET6, socket.SOCK_STREAM, 262)),
    "raw": attempt(open_socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
    "packet": attempt(open_socket(17, socket.SOCK_RAW, 0)),
    "vsock": attempt(open_socket(40, socket.SOCK_STREAM, 0)),
    "netlink audit": attempt(open_socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)),
    "io_uring_setup": attempt(syscall(425, 8, None)),
    "bpf": attempt(syscall(321, 0, None, 0)),
    "userfaultfd": attempt(syscall(323, 0)),
    "keyctl": attempt(syscall(250, 0, 0)),
    "perf_event_open": attempt(syscall(298, None, 0, -1, -1, 0)),
    "symlink": attempt(link),
    "user namespace": attempt(syscall(272, 0x10000000)),
    "threads and children": attempt(thread_and_child),
}))
"""
NEEDED = {"tcp", "udp", "tcp6", "unix", "netlink route", "threads and children"}


def _refused_all_but_needed(found: dict[str, str]) -> None:
    assert {name for name, outcome in found.items() if outcome == "allowed"} == NEEDED, found


@pytest.mark.slow
@pytest.mark.parametrize("disable_userns", [True, False],
                         ids=["bwrap-0.8", "bwrap-without-disable-userns"])
def test_a_sandboxed_task_is_refused_what_no_trial_needs(
    tmp_path: Path, disable_userns: bool
) -> None:
    """Also as Ubuntu 22.04's and RHEL 9's bubblewrap would run it: without `--disable-userns`,
    the filter alone refuses a user namespace (and clone3, so threads fall back to clone)."""
    seccomp = seccomp_memfd()
    try:
        argv = [*sandbox_command(python=TaskPython(), exposure=Exposure(), seccomp_fd=seccomp,
                                 disable_userns=disable_userns),
                sys.executable, "-c", PROBE]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, env={},
                                pass_fds=(seccomp,), timeout=60)
    finally:
        os.close(seccomp)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    _refused_all_but_needed(found)
    assert found["mptcp"] == "EPROTONOSUPPORT" and found["io_uring_setup"] == "ENOSYS"
    if not disable_userns:
        assert found["user namespace"] == "EPERM"  # the filter's answer, not bwrap's limit


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_a_task_container_is_refused_the_same_under_each_engine_api(
    engine: str, podman_engine: str, tmp_path: Path
) -> None:
    """The engine's own default profile with the platform's refusals added (podman's service
    stands in for Docker's API too)."""
    settings = ContainerSettings(engine_url=podman_engine, node=f"seccomp-{uuid.uuid4().hex[:8]}",
                                 oci_runtime="runc")
    runtime_image_ensure(settings=settings)
    profile = seccomp_profile_write(directory=tmp_path)
    assert profile, "containers-common's default seccomp profile is not installed"
    folder = tmp_path / "probe"
    folder.mkdir(mode=0o755)
    (folder / "probe.py").write_text(PROBE)
    request = ContainerRequest(
        image=RUNTIME_IMAGE, command=("/usr/bin/python3", "/probe/probe.py"), user="1000:1000",
        mounts=(BindMount("/usr", "/usr"), BindMount("/etc/ld.so.cache", "/etc/ld.so.cache"),
                BindMount(str(folder), "/probe")),
        tmpfs={"/tmp": "rw,size=16m,mode=1777"}, env={}, work_dir="/", hostname="trial",
        labels={LABEL_NODE: settings.node}, network="none", pids=512,
        oci_runtime="runc", seccomp_profile=profile,
    )
    container = container_create(settings=settings, engine=engine, request=request)
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0, container.logs()
        found = json.loads(container.logs(stderr=False).decode().strip().splitlines()[-1])
    finally:
        container.remove(force=True)
    _refused_all_but_needed(found)
    assert found["mptcp"] == "EPROTONOSUPPORT"
