"""A node's container engine and the limits of every task container it starts.

Apart from containers.py so that the runtime (runtime.py) can name the settings it carries
without importing what starts containers, which imports the runtime.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from training.errors import InvalidInput

if TYPE_CHECKING:
    from docker import DockerClient

RUNTIME_IMAGE = "localhost/tfplatform-runtime:host"
ENGINE_TIMEOUT_SECONDS = 120
GANG_NETWORKS = ("host", "gang")
WORKSPACE_RELAY = "relay"
GANG_NETWORK_PREFIX = "tfplatform-gang-"


@dataclass(frozen=True)
class ContainerSettings:
    """A node's engine and the limits of every task container it starts."""

    engine_url: str
    node: str
    # What warm containers and trials without an environment run: the node's own runtime
    # (built from an empty root filesystem) on a bare node; the platform's image in compose.
    node_image: str = RUNTIME_IMAGE
    oci_runtime: str = ""  # e.g. "runc" where the engine's default cannot run here
    memory_bytes: int = 0  # 0: no limit
    pids: int = 4096
    cpus: float = 0.0  # a hard quota per slot; 0: none, only the slots' weight
    # How a gang across nodes reaches itself: "host" (nodes on several machines: the host's
    # network, narrowed by Landlock) or "gang" (every node starts containers on this one engine:
    # an internal network per gang, nothing else on it).
    gang_network: str = "host"
    # Where a workspace container reaches the platform's API for its `tfp`: "relay" (no
    # network; the node's relay socket, api_relay.py), "host" (narrowed by Landlock to the API's
    # port) or an existing network on which only the web app answers.
    workspace_network: str = WORKSPACE_RELAY

    def __post_init__(self) -> None:
        if self.gang_network not in GANG_NETWORKS:
            raise InvalidInput(f"Unknown gang network {self.gang_network!r} (PLATFORM_CONTAINER_"
                               f"GANG_NETWORK): choose one of {', '.join(GANG_NETWORKS)}.")
        if self.workspace_network in ("", "none") or self.workspace_network.startswith(
                ("container:", GANG_NETWORK_PREFIX)):
            raise InvalidInput(f"PLATFORM_CONTAINER_WORKSPACE_NETWORK {self.workspace_network!r}"
                               " must be 'relay', 'host' or the name of a network the web app "
                               "is on.")

    def engine(self) -> EngineIdentity:
        return engine_identify(engine_url=self.engine_url)

    def client(self) -> DockerClient:
        import docker

        return docker.DockerClient(base_url=self.engine_url, version=self.engine().api_version,
                                   timeout=ENGINE_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class EngineIdentity:
    api_version: str
    podman: bool  # podman, whichever of its APIs (its own or the Docker-compatible one) is used


@functools.lru_cache(maxsize=16)
def engine_identify(*, engine_url: str) -> EngineIdentity:
    """The engine's API version and kind, asked once per process and engine (a failure is not
    kept). docker-py asks `GET /version` for every client it makes unless told the version, and
    podman answers each by looking up its components' packages: three `dpkg-query` runs, about
    0.2 CPU-s and half a second on a busy node, for every container a node started."""
    import docker
    from docker.constants import DEFAULT_DOCKER_API_VERSION

    api = docker.APIClient(base_url=engine_url, version=DEFAULT_DOCKER_API_VERSION,
                           timeout=ENGINE_TIMEOUT_SECONDS)
    try:
        version = api.version(api_version=False)
    finally:
        api.close()
    components = version.get("Components") or []
    return EngineIdentity(
        api_version=str(version["ApiVersion"]),
        podman=any("podman" in str(part.get("Name", "")).lower() for part in components))
