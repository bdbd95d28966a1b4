"""The one Landlock ruleset: what a confined process still reads, writes and reaches, each
caller's minimum ABI, and the error every caller translates. Each confinement is applied in a
child process: it cannot be undone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from confinement import (
    TCP_PORTS_ABI,
    Confinement,
    ConfinementError,
    abi_probe,
    confine_apply,
)

ROOT = Path(__file__).resolve().parents[2]
KERNEL_ABI = abi_probe()
needs_landlock = pytest.mark.skipif(KERNEL_ABI < 1, reason="no Landlock in this kernel")
needs_ports = pytest.mark.skipif(KERNEL_ABI < TCP_PORTS_ABI, reason="no TCP port rules")

PROBE = r"""
import json, os, socket, sys
from confinement import Confinement, ConfinementError, confine_apply

rules, minimum, actions = json.loads(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
try:
    confine_apply(confinement=Confinement.from_dict(rules), minimum_abi=minimum)
except ConfinementError as error:
    print(json.dumps({"error": str(error)}))
    raise SystemExit(0)

def attempt(kind, target):
    try:
        if kind == "read":
            open(target).read()
        elif kind == "write":
            open(target, "w").write("x")
        elif kind == "symlink":
            os.symlink("/etc/passwd", target)
        elif kind == "bind":
            with socket.socket() as s:
                s.bind(("127.0.0.1", target))
        return "ok"
    except OSError as error:
        return error.__class__.__name__

print(json.dumps({f"{kind} {target}": attempt(kind, target) for kind, target in actions}))
"""


def _confined(*, rules: Confinement, actions: list[tuple[str, object]],
              minimum_abi: int = 0) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(rules.as_dict()), str(minimum_abi),
         json.dumps(actions)],
        capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return dict(json.loads(result.stdout))


def _runtime() -> tuple[str, ...]:
    return ("/usr", "/lib", "/lib64", "/etc", "/proc", sys.base_prefix, sys.prefix, str(ROOT))


def test_a_confinement_survives_its_trip_through_a_task_order() -> None:
    rules = Confinement(read=("/a",), write=("/b",), write_data=("/c",), devices=("/dev/null",),
                        ports=(1, 2), connect_ports=(3,), bind_ports=(4,), abi=5)
    assert Confinement.from_dict(json.loads(json.dumps(rules.as_dict()))) == rules
    # An order written before write_data, devices and bind_ports still reads.
    assert Confinement.from_dict({"read": ["/a"], "write": [], "ports": [7]}) == Confinement(
        read=("/a",), ports=(7,))


def test_the_abi_is_the_kernels_at_most_the_limit() -> None:
    assert abi_probe(limit=0) == 0
    assert abi_probe(limit=1) == min(1, KERNEL_ABI)
    assert abi_probe(limit=99) == KERNEL_ABI


def test_without_landlock_to_use_a_confinement_is_a_no_op(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    outcome = _confined(rules=Confinement(read=_runtime(), abi=0),
                        actions=[("read", str(secret))])
    assert outcome == {f"read {secret}": "ok"}


@needs_landlock
def test_a_confined_process_reads_and_writes_only_what_it_was_given(tmp_path: Path) -> None:
    readable, writable, data, other = (tmp_path / n for n in ("read", "write", "data", "other"))
    for folder in (readable, writable, data, other):
        folder.mkdir()
    (readable / "f").write_text("r")
    (other / "f").write_text("o")
    rules = Confinement(read=(*_runtime(), str(readable)), write=(str(writable),),
                        write_data=(str(data),), abi=KERNEL_ABI)
    outcome = _confined(rules=rules, actions=[
        ("read", str(readable / "f")), ("read", str(other / "f")),
        ("write", str(writable / "new")), ("write", str(readable / "new")),
        ("symlink", str(writable / "link")), ("symlink", str(data / "link")),
        ("write", str(data / "trace")),
    ])
    assert outcome == {
        f"read {readable / 'f'}": "ok",
        f"read {other / 'f'}": "PermissionError",
        f"write {writable / 'new'}": "ok",
        f"write {readable / 'new'}": "PermissionError",
        # A link in a trial's work dir could point the platform at another tenant's files.
        f"symlink {writable / 'link'}": "PermissionError",
        f"symlink {data / 'link'}": "ok",
        f"write {data / 'trace'}": "ok",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@needs_ports
def test_a_confined_process_binds_only_its_own_ports() -> None:
    own, bind_only, other = _free_port(), _free_port(), _free_port()
    rules = Confinement(read=_runtime(), ports=(own,), bind_ports=(bind_only,), abi=KERNEL_ABI)
    outcome = _confined(rules=rules, actions=[("bind", own), ("bind", bind_only),
                                              ("bind", other)])
    assert outcome == {f"bind {own}": "ok", f"bind {bind_only}": "ok",
                       f"bind {other}": "PermissionError"}


def test_a_caller_that_needs_a_newer_abi_gets_a_confinement_error() -> None:
    outcome = _confined(rules=Confinement(read=_runtime(), abi=0), actions=[],
                        minimum_abi=TCP_PORTS_ABI)
    assert outcome == {"error": f"Landlock ABI 0 cannot confine this ({TCP_PORTS_ABI}+ needed)."}


@needs_landlock
def test_a_process_with_threads_is_refused_not_half_confined() -> None:
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(ConfinementError, match="one thread"):
            confine_apply(confinement=Confinement(read=_runtime(), abi=KERNEL_ABI))
    finally:
        stop.set()
        thread.join()
