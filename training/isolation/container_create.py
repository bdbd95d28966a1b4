"""One task container created through its engine's own API, from one engine-neutral request.

docker: the Docker API (docker-py); GPUs as a device request by UUID, which the NVIDIA
container runtime hands over. podman: libpod's API, because podman's Docker-compatible API
(4.3) drops device requests and takes a CDI name in `Devices` for a path, while libpod's
resolves `nvidia.com/gpu=<UUID>` through the node's CDI specs (`nvidia-ctk cdi generate`).
Both translations read the same request, so the lockdown and limits cannot differ by engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

    from training.isolation.container_settings import ContainerSettings

# Any libpod API version podman 4.x serves; podman 5 still accepts it.
LIBPOD_API = "v4.0.0"
CPU_PERIOD_MICROSECONDS = 100_000
CDI_GPU_KIND = "nvidia.com/gpu"
# A network namespace by path (podman's `--network ns:<path>`), which libpod's API takes.
NETNS_PATH_PREFIX = "ns:"


@dataclass(frozen=True)
class BindMount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerRequest:
    """What every task container is: no capabilities, no new privileges, a read-only root."""

    image: str
    command: tuple[str, ...]
    user: str
    mounts: tuple[BindMount, ...]
    tmpfs: dict[str, str]  # target -> mount options, e.g. "rw,size=2g,mode=1777"
    env: dict[str, str]
    work_dir: str
    labels: dict[str, str]
    hostname: str | None
    # "none", "host", "container:<id>" (another task's namespace), "ns:<path>" (a gang's network
    # namespace on a node run as root: podman only) or a network's name, joined under
    # `network_alias`.
    network: str
    network_alias: str = ""
    memory_bytes: int = 0  # 0: no limit; swap is never allowed beyond it
    pids: int = 4096
    nofile: int = 4096
    cpu_shares: int = 1024
    nano_cpus: int = 0  # 0: no hard quota
    oci_runtime: str = ""
    gpu_uuids: tuple[str, ...] = field(default=())
    # The engine's default seccomp profile plus the platform's refusals (seccomp.py), as a file
    # on the engine's machine; "" leaves the engine's built-in default.
    seccomp_profile: str = ""

    @property
    def named_network(self) -> bool:
        return self.network not in ("none", "host") and not self.network.startswith(
            ("container:", NETNS_PATH_PREFIX))


def container_create(*, settings: ContainerSettings, engine: str, request: ContainerRequest
                     ) -> Container:
    """The started container; the engine's refusal (an image missing, a GPU it cannot resolve)
    raises docker-py's APIError, whichever API was used."""
    client = settings.client()
    if engine == "podman":
        container = client.containers.get(_libpod_create(client=client, request=request))
    else:
        container = client.containers.create(**docker_arguments(
            client=client, request=request, podman=settings.engine().podman))
    container.start()
    return container


def docker_arguments(*, client: DockerClient, request: ContainerRequest, podman: bool
                     ) -> dict[str, Any]:
    """docker-py's create arguments for the request (`podman`: podman's Docker-compatible API
    answers them)."""
    from docker.types import DeviceRequest, Mount, Ulimit

    arguments: dict[str, Any] = {
        "image": request.image, "command": list(request.command), "user": request.user,
        "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "read_only": True,
        "hostname": request.hostname, "environment": request.env,
        "working_dir": request.work_dir, "labels": request.labels,
        "mounts": [Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                   for m in request.mounts],
        "tmpfs": request.tmpfs, "pids_limit": request.pids, "cpu_shares": request.cpu_shares,
        "ulimits": [Ulimit(name="nofile", soft=request.nofile, hard=request.nofile),
                    Ulimit(name="nproc", soft=request.pids, hard=request.pids)],
    }
    if request.seccomp_profile:
        # Docker's API takes the profile itself; podman's Docker-compatible one, a path.
        profile = (request.seccomp_profile if podman
                   else Path(request.seccomp_profile).read_text())
        arguments["security_opt"] = [*arguments["security_opt"], f"seccomp={profile}"]
    if request.memory_bytes:
        arguments["mem_limit"] = arguments["memswap_limit"] = request.memory_bytes
    if request.nano_cpus:
        arguments["nano_cpus"] = request.nano_cpus
    if request.oci_runtime:
        arguments["runtime"] = request.oci_runtime
    if request.named_network:
        arguments["network"] = request.network
        arguments["networking_config"] = {request.network: client.api.create_endpoint_config(
            aliases=[request.network_alias] if request.network_alias else None)}
    else:
        arguments["network_mode"] = request.network
    if request.gpu_uuids:
        arguments["device_requests"] = [DeviceRequest(
            driver="nvidia", device_ids=list(request.gpu_uuids), capabilities=[["gpu"]])]
    return arguments


def libpod_spec(*, request: ContainerRequest) -> dict[str, Any]:
    """libpod's SpecGenerator for the request (the body of `POST /libpod/containers/create`)."""
    mounts: list[dict[str, Any]] = [
        {"destination": m.target, "source": m.source, "type": "bind",
         "options": ["rbind", "ro" if m.read_only else "rw"]}
        for m in request.mounts
    ]
    mounts += [{"destination": target, "source": "tmpfs", "type": "tmpfs",
                "options": options.split(",")} for target, options in request.tmpfs.items()]
    cpu: dict[str, int] = {"shares": request.cpu_shares}
    if request.nano_cpus:
        cpu["period"] = CPU_PERIOD_MICROSECONDS
        cpu["quota"] = request.nano_cpus * CPU_PERIOD_MICROSECONDS // 1_000_000_000
    limits: dict[str, Any] = {"pids": {"limit": request.pids}, "cpu": cpu}
    if request.memory_bytes:
        limits["memory"] = {"limit": request.memory_bytes, "swap": request.memory_bytes}
    spec: dict[str, Any] = {
        "image": request.image, "command": list(request.command), "user": request.user,
        "cap_drop": ["ALL"], "no_new_privileges": True, "read_only_filesystem": True,
        "env": request.env, "work_dir": request.work_dir, "labels": request.labels,
        "mounts": mounts, "resource_limits": limits,
        "r_limits": [{"type": "nofile", "soft": request.nofile, "hard": request.nofile},
                     {"type": "nproc", "soft": request.pids, "hard": request.pids}],
        "devices": [{"path": f"{CDI_GPU_KIND}={uuid}"} for uuid in request.gpu_uuids],
    }
    if request.seccomp_profile:
        spec["seccomp_profile_path"] = request.seccomp_profile
    if request.hostname:
        spec["hostname"] = request.hostname
    if request.oci_runtime:
        spec["oci_runtime"] = request.oci_runtime
    if request.named_network:
        spec["netns"] = {"nsmode": "bridge"}
        spec["Networks"] = {request.network: {
            "aliases": [request.network_alias] if request.network_alias else []}}
    elif request.network.startswith("container:"):
        spec["netns"] = {"nsmode": "container", "value": request.network.split(":", 1)[1]}
    elif request.network.startswith(NETNS_PATH_PREFIX):
        spec["netns"] = {"nsmode": "path", "value": request.network[len(NETNS_PATH_PREFIX):]}
    else:
        spec["netns"] = {"nsmode": request.network}
    return spec


def _libpod_create(*, client: DockerClient, request: ContainerRequest) -> str:
    from docker.errors import APIError

    api = client.api
    response = api.post(f"{api.base_url}/{LIBPOD_API}/libpod/containers/create",
                        json=libpod_spec(request=request), timeout=api.timeout)
    if not response.ok:
        try:
            message = str(response.json().get("message", response.text))
        except ValueError:
            message = response.text
        raise APIError(f"{response.status_code} {message}")
    return str(response.json()["Id"])
