"""Test "machines": network namespaces on one bridge, which lives in a namespace of its own, so
nothing of them is on the machine's own network.

    with machines_on_a_bridge(prefix="tfpt123", addresses={"a": "10.231.0.1", ...}) as names:
        names["a"]   # the namespace's name, under /run/netns
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout


@contextlib.contextmanager
def machines_on_a_bridge(*, prefix: str, addresses: dict[str, str]) -> Iterator[dict[str, str]]:
    """One namespace per key, its eth0 at that /24 address on the shared bridge; all removed
    on exit, whatever happened."""
    names = {key: f"{prefix}{key}" for key in ("link", *addresses)}
    try:
        for name in names.values():
            ip("netns", "add", name)
            ip("-n", name, "link", "set", "lo", "up")
        ip("-n", names["link"], "link", "add", "br0", "type", "bridge")
        ip("-n", names["link"], "link", "set", "br0", "up")
        for key, address in addresses.items():
            ip("-n", names["link"], "link", "add", f"port{key}", "type", "veth", "peer", "name",
               "eth0", "netns", names[key])
            ip("-n", names["link"], "link", "set", f"port{key}", "master", "br0", "up")
            ip("-n", names[key], "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", names[key], "link", "set", "eth0", "up")
        yield names
    finally:
        for name in names.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
