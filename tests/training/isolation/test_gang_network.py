"""A gang across nodes on nodes run as root: each node's tasks live in a network namespace of the
gang's own, which reaches only the peers' gang ports and which only the peers reach.

Three "machines" are network namespaces on one bridge: A and B run a node each (a supervisor
under `nsenter --net`), C is a bystander on the same link. Landlock is off for the trial, so
what refuses is the network itself (Landlock's port rules are an extra on top of it).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.netns import ip, machines_on_a_bridge
from training.isolation.runtime import repo_root
from training.spec import Resources
from training.tf_config import ClusterPlan, TaskAddress

# Host-wide network namespaces (tfp-*), nftables and fixed ports: one worker runs these, in turn.
pytestmark = pytest.mark.xdist_group("netns")

LINK = "10.231.0"
ADDRESSES = {"a": f"{LINK}.1", "b": f"{LINK}.2", "c": f"{LINK}.3"}
GANG_PORTS = {"a": 41001, "b": 41002}
OTHER_PORT = 41501  # a listener of each machine's own, outside the gang
PROBE_SECONDS = 1.5

# Each task, once its strategy's server listens: what it can reach, then wait for "go".
GANG_MODULE = """
import json, os, socket, time
import tf_keras as keras

TARGETS = {targets!r}
PEER = {peer!r}


def _connect(host, port):
    probe = socket.socket()
    probe.settimeout({timeout})
    try:
        probe.connect((host, port))
        return "connected"
    except OSError as error:
        return type(error).__name__
    finally:
        probe.close()


def _gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(bytes.fromhex(fields[2])[::-1])
    return ""


def build_model(hparams):
    task = os.environ["PLATFORM_TASK"].replace(":", "-")
    if not os.path.exists(f"probed-{{task}}"):  # the chief builds once more to export
        host = PEER[task]
        deadline = time.monotonic() + 30
        while _connect(*host) != "connected" and time.monotonic() < deadline:
            time.sleep(0.5)  # the peer's server may still be starting
        targets = [*TARGETS, (_gateway(), {other})]
        found = {{
            "netns": os.stat("/proc/self/ns/net").st_ino,
            "peer": _connect(*host),
            "probes": {{f"{{h}}:{{p}}": _connect(h, p) for h, p in targets}},
        }}
        with open(f"probed-{{task}}.tmp", "w") as handle:
            json.dump(found, handle)
        os.rename(f"probed-{{task}}.tmp", f"probed-{{task}}")
        while not os.path.exists("go"):
            time.sleep(0.2)
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""

NODE = """
import json, sys
from dataclasses import replace
from training.tf_config import ClusterPlan
from training.isolation.container_settings import ContainerSettings
from training.isolation.runtime_factory import runtime_for
from training.spec import TrialSpec
from training.supervisor.supervise import trial_supervise

spec_path, plan_path, local_host, run_dir, out, name, engine, node = sys.argv[1:]
containers = ContainerSettings(engine_url=engine, node=node, oci_runtime="runc") \
    if engine else None
runtime = replace(runtime_for(name=name, containers=containers), landlock_abi=0)
outcome = trial_supervise(
    spec=TrialSpec.from_json(open(spec_path).read()), on_events=lambda events: None,
    should_cancel=lambda: False, grace_seconds=10, local_host=local_host, run_dir=run_dir,
    cluster=ClusterPlan.from_json(open(plan_path).read()), runtime=runtime)
open(out, "w").write(json.dumps({"status": outcome.status, "reason": outcome.exit_reason}))
"""

LISTEN = """
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1])))
server.listen(16)
print("listening", flush=True)
while True:
    server.accept()[0].close()
"""

CONNECT = """
import socket, sys
probe = socket.socket()
probe.settimeout(float(sys.argv[3]))
try:
    probe.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as error:
    print(type(error).__name__)
"""


def _root_or_skip() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: gang networks are the node's (ip, nft, namespaces)")
        pytest.skip("gang networks are built by a node run as root")


def _in(netns: str, code: str, *args: str) -> list[str]:
    path = f"PYTHONPATH={repo_root() / 'platform'}:{repo_root()}"  # whatever the caller's cwd
    return ["nsenter", f"--net=/run/netns/{netns}", "--", "env", path, sys.executable, "-c",
            code, *args]


def _connect(netns: str, host: str, port: int) -> str:
    result = subprocess.run(_in(netns, CONNECT, host, str(port), str(PROBE_SECONDS)),
                            capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.strip()


@pytest.fixture
def machines() -> Iterator[dict[str, str]]:
    """Network namespaces a, b and c on one bridge (in a namespace of its own too)."""
    _root_or_skip()
    with machines_on_a_bridge(prefix=f"tfpt{os.getpid() % 100000}",
                              addresses=ADDRESSES) as names:
        yield names


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["sandbox", "podman"])
def test_a_gang_across_nodes_reaches_only_its_peers_and_only_they_reach_it(
    machines: dict[str, str], tmp_path: Path, make_spec: Any, runtime: str,
    request: pytest.FixtureRequest,
) -> None:
    """Under podman, every node is on a machine of its own (no shared engine network): the
    containers join the gang's namespace by path."""
    engine = ""
    if runtime == "podman":
        from training.isolation.containers import (
            RUNTIME_IMAGE,
            ContainerSettings,
            containers_reap,
            runtime_image_ensure,
        )

        engine = request.getfixturevalue("podman_engine")
        settings = ContainerSettings(engine_url=engine, node="gang-image", oci_runtime="runc")
        assert runtime_image_ensure(settings=settings) == RUNTIME_IMAGE
    peer = {"worker-0": (ADDRESSES["b"], GANG_PORTS["b"]),
            "worker-1": (ADDRESSES["a"], GANG_PORTS["a"])}
    targets = [(ADDRESSES["a"], OTHER_PORT), (ADDRESSES["b"], OTHER_PORT),
               (ADDRESSES["c"], OTHER_PORT), (ADDRESSES["c"], GANG_PORTS["a"])]
    module = tmp_path / "gang.py"
    module.write_text(GANG_MODULE.format(targets=targets, peer=peer, timeout=PROBE_SECONDS,
                                         other=OTHER_PORT))
    work = tmp_path / "work"  # shared storage, as across real nodes
    spec = make_spec(work_dir=work, model=str(module), resources=Resources(workers=2),
                     hyperparameters={"epochs": 1})
    plan = ClusterPlan((TaskAddress("worker", 0, ADDRESSES["a"], GANG_PORTS["a"]),
                        TaskAddress("worker", 1, ADDRESSES["b"], GANG_PORTS["b"])),
                       dispatch_key=str(time.time()))
    (tmp_path / "spec.json").write_text(spec.to_json())
    (tmp_path / "plan.json").write_text(plan.to_json())
    listeners = [subprocess.Popen(_in(machines[key], LISTEN, str(OTHER_PORT)),
                                  stdout=subprocess.PIPE, text=True) for key in ("a", "b", "c")]
    nodes = {key: subprocess.Popen(
        _in(machines[key], NODE, str(tmp_path / "spec.json"), str(tmp_path / "plan.json"),
            ADDRESSES[key], str(tmp_path / f"runs-{key}"), str(tmp_path / f"outcome-{key}"),
            runtime, engine, f"gang-{key}-{tmp_path.name}"),
        cwd=tmp_path) for key in ("a", "b")}
    try:
        for listener in listeners:
            assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        deadline = time.monotonic() + 120
        probed = [work / f"probed-worker-{i}" for i in range(2)]
        while not all(p.exists() for p in probed):
            assert time.monotonic() < deadline, "the tasks never reached their build"
            assert all(n.poll() is None for n in nodes.values()), [
                (tmp_path / f"outcome-{k}").read_text() for k in nodes
                if (tmp_path / f"outcome-{k}").exists()]
            time.sleep(0.5)
        seen = [json.loads(p.read_text()) for p in probed]
        gang_a = next(line.split()[3] for line in ip(
            "-n", machines["a"], "-4", "-o", "addr", "show").splitlines() if " tfp" in line)
        inner_a = str(ipaddress.ip_interface(gang_a).ip + 1)  # the namespace's end of the /30

        # Only the peer node reaches the gang's server on A: not A itself, not C, and nothing
        # reaches the namespace's own address from A.
        tf_port = GANG_PORTS["a"]
        assert _connect(machines["b"], ADDRESSES["a"], tf_port) == "connected"
        assert _connect(machines["a"], ADDRESSES["a"], tf_port) != "connected"
        assert _connect(machines["a"], inner_a, tf_port) != "connected"
        assert _connect(machines["c"], ADDRESSES["a"], tf_port) != "connected"
        # The listeners the tasks failed to reach are up: others do reach them.
        assert _connect(machines["c"], ADDRESSES["a"], OTHER_PORT) == "connected"
        assert _connect(machines["a"], ADDRESSES["b"], OTHER_PORT) == "connected"

        for found in seen:
            assert found["peer"] == "connected", found  # the gang's own traffic flows
            refused = {"ConnectionRefusedError", "TimeoutError"}
            assert set(found["probes"].values()) <= refused, found
            assert len(found["probes"]) == len(targets) + 1  # the namespace's gateway too
        host_inodes = {_netns_inode(machines[key]) for key in ("a", "b")}
        task_inodes = {found["netns"] for found in seen}
        gang_inodes = {p.stat().st_ino for p in Path("/run/netns").glob("tfp-*")}
        assert len(task_inodes) == 2 and task_inodes <= gang_inodes  # each node's gang's own
        assert not task_inodes & host_inodes
        assert os.stat("/proc/self/ns/net").st_ino not in task_inodes
    finally:
        (work / "go").touch()
        for node in nodes.values():
            try:
                node.wait(timeout=120)
            except subprocess.TimeoutExpired:
                node.kill()
        for listener in listeners:
            listener.kill()
            listener.wait()
        if engine:
            for key in nodes:
                containers_reap(settings=ContainerSettings(engine_url=engine,
                                                           node=f"gang-{key}-{tmp_path.name}"))

    outcomes = {key: json.loads((tmp_path / f"outcome-{key}").read_text()) for key in nodes}
    assert [o["status"] for o in outcomes.values()] == ["completed", "completed"], outcomes
    leftovers = [p.name for p in Path("/run/netns").glob("tfp-*")
                 if p.stat().st_ino in task_inodes]
    assert leftovers == []
    for key in ("a", "b"):
        tables = _nft_tables(machines[key])
        assert "tfp_" not in tables, tables
        links = [line.split(": ")[1].split("@")[0]
                 for line in ip("-n", machines[key], "-o", "link", "show").splitlines()]
        assert sorted(links) == ["eth0", "lo"], links


def _netns_inode(name: str) -> int:
    return Path(f"/run/netns/{name}").stat().st_ino


LEFT_BEHIND = """
import os, sys
from pathlib import Path
from training.errors import InvalidInput
from training.isolation.gang_network import gang_network_create

state = Path(sys.argv[1])
network = gang_network_create(key="left/1", local_ip="10.231.0.1", local_ports=(41001,),
                              peers=(("10.231.0.2", 41002),), subnet="100.64.0.0/16",
                              state_dir=state)
try:  # a second gang of this node on the same port: a peer's connection would be ambiguous
    gang_network_create(key="other/1", local_ip="10.231.0.1", local_ports=(41001,),
                        peers=(("10.231.0.3", 41003),), subnet="100.64.0.0/16", state_dir=state)
    print("clash allowed")
except InvalidInput as error:
    print("clash refused:", error)
print(network.netns, flush=True)
os._exit(0)  # a node killed: nothing removed
"""

REAP = """
import sys
from pathlib import Path
from training.isolation.gang_network import gang_networks_reap

print(" ".join(gang_networks_reap(state_dir=Path(sys.argv[1]))))
"""


def test_what_a_dead_node_left_is_reaped_and_a_port_has_one_gang(
    machines: dict[str, str], tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    left = subprocess.run(_in(machines["a"], LEFT_BEHIND, state), capture_output=True,
                          text=True, timeout=60, check=True).stdout.splitlines()
    assert left[0].startswith("clash refused: Port(s) [41001]"), left
    netns = left[1]
    assert Path(f"/run/netns/{netns}").exists()
    assert "tfp_" in _nft_tables(machines["a"])

    reaped = subprocess.run(_in(machines["a"], REAP, state), capture_output=True, text=True,
                            timeout=60, check=True).stdout.split()
    assert reaped == [netns]
    assert not Path(f"/run/netns/{netns}").exists()
    assert "tfp_" not in _nft_tables(machines["a"])
    assert list((tmp_path / "state").glob("*.json")) == []


def _nft_tables(netns: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "nft", "list", "tables"],
                          capture_output=True, text=True, check=True).stdout
