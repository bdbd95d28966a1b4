"""A gang across nodes: on each node, a network namespace of the gang's own that reaches only the
gang's peers, and that only they reach.

    network = gang_network_create(key=f"{trial_id}/{attempt}", local_ip="10.0.0.1",
                                  local_ports=(40001,), peers=(("10.0.0.2", 40002),),
                                  subnet="100.64.0.0/16")
    ... every local task joins network.path (sandbox.NETNS_PREFIX) ...
    gang_network_remove(network=network)

The node (root) makes a named namespace, a veth pair with a /30 of `subnet`, and the node's own
gang address on the namespace's loopback, so the node's own tasks talk inside it. One nftables
table per gang (deleted atomically) then lets in only peers' connections to the local tasks'
ports (DNAT from the node's address), lets out only connections to the peers' (address, port)
pairs (SNAT to the node's address, which the peers' rules expect), and keeps every process of
the node itself from opening a connection into the namespace or being reached from it. The
node turns on IPv4 forwarding, as podman and docker do.

Each gang holds a lock on its record under STATE_DIR for as long as its supervisor lives: the
next creation on the node tears down what a crashed supervisor left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.errors import InvalidInput

STATE_DIR = Path("/run/tfp-gangs")
NETNS_DIR = Path("/run/netns")
NETNS_NAME_PREFIX = "tfp-"
TOOLS = {"ip": "iproute2", "nft": "nftables"}
SBIN = "/usr/sbin:/sbin"
COMMAND_TIMEOUT_SECONDS = 30.0
# The namespace's end of the veth pair: the only interface there besides loopback.
INNER_VETH = "eth0"


@dataclass(frozen=True)
class GangNetwork:
    netns: str
    veth: str
    table: str
    record: Path
    lock_fd: int

    @property
    def path(self) -> str:
        return str(NETNS_DIR / self.netns)


def gang_network_check() -> None:
    """Fails clearly when this node lacks what gang networks are built with."""
    missing = [package for tool, package in TOOLS.items() if _tool(tool) is None]
    if missing:
        raise InvalidInput(
            f"A node run as root gives each gang across nodes a network of its own, built with "
            f"Debian's {' and '.join(missing)}: install it (`make sandbox` does), or set "
            f"PLATFORM_GANG_SUBNET empty to share the node's network, narrowed by Landlock.")


def node_ipv4(*, host: str) -> str:
    """A task address's host as an IPv4 address (the rules name addresses, not names)."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as error:
        raise InvalidInput(f"The gang's node {host!r} has no IPv4 address: {error}") from error


def gang_network_create(*, key: str, local_ip: str, local_ports: tuple[int, ...],
                        peers: tuple[tuple[str, int], ...], subnet: str,
                        state_dir: Path = STATE_DIR) -> GangNetwork:
    """The gang's namespace on this node (see the module's doc); InvalidInput if it cannot be
    built (nothing of it is left behind then)."""
    gang_network_check()
    if not peers or not local_ports:
        raise ValueError("A gang network needs local tasks and peers on other nodes.")
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    network, index = _allocate(key=key, local_ip=local_ip, local_ports=local_ports,
                               state_dir=state_dir)
    try:
        pool = ipaddress.IPv4Network(subnet)
        outer, inner = pool[4 * index + 1], pool[4 * index + 2]
        _nft(_ruleset(network=network, local_ip=local_ip, inner=str(inner),
                      local_ports=local_ports, peers=peers))
        _ip("netns", "add", network.netns)
        _ip("-n", network.netns, "link", "set", "lo", "up")
        _ip("-n", network.netns, "addr", "add", f"{local_ip}/32", "dev", "lo")
        _ip("link", "add", network.veth, "type", "veth", "peer", "name", INNER_VETH,
            "netns", network.netns)
        with contextlib.suppress(OSError):  # a kernel without IPv6: nothing to turn off
            Path(f"/proc/sys/net/ipv6/conf/{network.veth}/disable_ipv6").write_text("1")
        _ip("addr", "add", f"{outer}/30", "dev", network.veth)
        _ip("link", "set", network.veth, "up")
        _ip("-n", network.netns, "addr", "add", f"{inner}/30", "dev", INNER_VETH)
        _ip("-n", network.netns, "link", "set", INNER_VETH, "up")
        _ip("-n", network.netns, "route", "add", "default", "via", str(outer))
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    except (OSError, ValueError, IndexError) as error:
        gang_network_remove(network=network)
        raise InvalidInput(f"This node could not build the gang's network: {error}") from error
    return network


def gang_network_remove(*, network: GangNetwork) -> None:
    """Everything of the gang's network on this node, then its record (best effort: each part
    may already be gone)."""
    _teardown(netns=network.netns, veth=network.veth, table=network.table)
    with contextlib.suppress(OSError):
        network.record.unlink()
    with contextlib.suppress(OSError):
        os.close(network.lock_fd)


def gang_networks_reap(*, state_dir: Path = STATE_DIR) -> list[str]:
    """Tears down the gang networks of this node whose supervisor is gone; their namespaces."""
    if not state_dir.is_dir():
        return []
    with _state_locked(state_dir=state_dir):
        return _reap(state_dir=state_dir)


def _allocate(*, key: str, local_ip: str, local_ports: tuple[int, ...],
              state_dir: Path) -> tuple[GangNetwork, int]:
    """A free /30 and names, recorded and locked for as long as this process lives. InvalidInput
    if another gang of this node has one of `local_ports`: a peer's connection to it would be
    sent to whichever gang's table came first."""
    with _state_locked(state_dir=state_dir):
        _reap(state_dir=state_dir)
        records = {p: _record_read(p) for p in state_dir.glob("*.json")}
        clash = sorted({port for found in records.values()
                        if found.get("host_netns") == _own_netns()
                        for port in found.get("ports", ()) if port in local_ports})
        if clash:
            raise InvalidInput(f"Port(s) {clash} belong to another gang on this node.")
        taken = {int(p.stem) for p in records if p.stem.isdigit()}
        index = next(i for i in range(len(taken) + 1) if i not in taken)
        digest = hashlib.sha256(f"{key}\0{local_ip}\0{index}".encode()).hexdigest()[:10]
        record = state_dir / f"{index}.json"
        fd = os.open(record, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        network = GangNetwork(netns=f"{NETNS_NAME_PREFIX}{digest}", veth=f"tfp{digest}",
                              table=f"tfp_{digest}", record=record, lock_fd=fd)
        os.write(fd, json.dumps({"netns": network.netns, "veth": network.veth,
                                 "table": network.table, "host_netns": _own_netns(),
                                 "ports": sorted(local_ports)}).encode())
        return network, index


def _reap(*, state_dir: Path) -> list[str]:
    reaped = []
    for record in state_dir.glob("*.json"):
        try:
            fd = os.open(record, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its supervisor lives
            found = _record_read(record)
            # Another host namespace's record (nodes sharing /run, as tests do) is its own to
            # reap: its table and veth are not reachable from here.
            if found.get("host_netns", _own_netns()) != _own_netns():
                continue
            if found:
                _teardown(netns=found["netns"], veth=found["veth"], table=found["table"])
                reaped.append(found["netns"])
            record.unlink()
        finally:
            os.close(fd)
    return reaped


def _record_read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@contextlib.contextmanager
def _state_locked(*, state_dir: Path) -> Iterator[None]:
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _teardown(*, netns: str, veth: str, table: str) -> None:
    for argv in ([_tool("nft") or "nft", "delete", "table", "inet", table],
                 [_tool("ip") or "ip", "link", "del", veth],
                 [_tool("ip") or "ip", "netns", "del", netns]):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, capture_output=True, check=False, timeout=COMMAND_TIMEOUT_SECONDS)


def _ruleset(*, network: GangNetwork, local_ip: str, inner: str, local_ports: tuple[int, ...],
             peers: tuple[tuple[str, int], ...]) -> str:
    veth = f'"{network.veth}"'
    peer_ips = _set(sorted({ip for ip, _ in peers}))
    ports = _set(sorted(set(local_ports)))
    endpoints = _set(sorted({f"{ip} . {port}" for ip, port in peers}))
    return f"""
table inet {network.table} {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    ip saddr {peer_ips} ip daddr {local_ip} tcp dport {ports} dnat ip to {inner}
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname != {veth} ip saddr {inner} snat ip to {local_ip}
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname {veth} ct state established,related accept
    iifname {veth} ct state new ip daddr . tcp dport {endpoints} accept
    iifname {veth} drop
    oifname {veth} ct state established,related accept
    oifname {veth} ct state new ct status dnat ip saddr {peer_ips} tcp dport {ports} accept
    oifname {veth} drop
  }}
  chain input {{
    type filter hook input priority filter; policy accept;
    iifname {veth} ct state established,related accept
    iifname {veth} drop
  }}
  chain output {{
    type filter hook output priority filter; policy accept;
    oifname {veth} ct state established,related accept
    oifname {veth} drop
  }}
}}
"""


def _set(items: list[str] | list[int]) -> str:
    return "{ " + ", ".join(map(str, items)) + " }"


def _own_netns() -> int:
    return os.stat("/proc/self/ns/net").st_ino


def _tool(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=SBIN)


def _ip(*args: str) -> None:
    _run([_tool("ip") or "ip", *args])


def _nft(ruleset: str) -> None:
    _run([_tool("nft") or "nft", "-f", "-"], stdin=ruleset)


def _run(argv: list[str], *, stdin: str | None = None) -> None:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False,
                            timeout=COMMAND_TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise OSError(f"{' '.join(argv[:4])}: {result.stderr.strip()[-300:]}")
