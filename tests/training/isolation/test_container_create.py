"""Task containers created through each engine's own API: the same lockdown under docker's API
and libpod's, and GPUs handed over by the engine, by UUID, never by an environment variable."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from training.isolation import containers
from training.isolation.container_create import ContainerRequest, docker_arguments, libpod_spec
from training.isolation.containers import (
    LABEL_NODE,
    RUNTIME_IMAGE,
    ContainerSettings,
    containers_reap,
    runtime_image_ensure,
)
from training.isolation.runtime import Runtime, TaskPython
from training.isolation.runtime_factory import runtime_for
from training.isolation.sandbox import Exposure
from training.supervisor.hosts import host_start
from training.supervisor.supervise import task_base_environment

pytestmark = pytest.mark.slow

# Where podman 4.3 reads CDI specs (it has no setting for another folder).
CDI_DIR = Path("/var/run/cdi")


@pytest.fixture(scope="module")
def engine_settings(podman_engine: str,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerSettings]:
    settings = ContainerSettings(engine_url=podman_engine,
                                 node=f"create-{tmp_path_factory.getbasetemp().name}",
                                 oci_runtime="runc", memory_bytes=2**30, pids=512)
    assert runtime_image_ensure(settings=settings) == RUNTIME_IMAGE
    yield settings
    containers_reap(settings=settings)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A GPU as the NVIDIA toolkit describes one in CDI (`nvidia-ctk cdi generate`), its device
    node standing in by /dev/null's, and NVML (hardware) answering its UUID for index 0."""
    gpu_uuid = f"GPU-tfplatform-test-{uuid.uuid4()}"
    node = f"/dev/tfplatform-test-{gpu_uuid[-8:]}"
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    spec = CDI_DIR / f"tfplatform-test-{gpu_uuid[-8:]}.json"
    spec.write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": gpu_uuid, "containerEdits": {
            "env": [f"TFPLATFORM_TEST_GPU={gpu_uuid}"],
            "deviceNodes": [{"path": node, "hostPath": "/dev/null"}]}}],
        "containerEdits": {},
    }))
    monkeypatch.setattr(containers, "gpu_uuids",
                        lambda *, indices: tuple(gpu_uuid for _ in indices))
    yield gpu_uuid, node
    spec.unlink()


def _start(runtime: Runtime, tmp_path: Path, *, gpus: tuple[int, ...] = ()) -> Any:
    return host_start(runtime=runtime, python=TaskPython(), env=task_base_environment(),
                      exposure=Exposure(), log=tmp_path / f"host-{uuid.uuid4().hex}.log",
                      cwd=tmp_path, gpus=gpus)


def _environ(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")


def test_podman_hands_a_gpu_over_by_its_cdi_name_and_a_cpu_task_gets_none(
    engine_settings: ContainerSettings, fake_gpu: tuple[str, str], tmp_path: Path
) -> None:
    gpu_uuid, node = fake_gpu
    podman = runtime_for(name="podman", containers=engine_settings)
    gpu_host, cpu_host = _start(podman, tmp_path, gpus=(0,)), _start(podman, tmp_path)
    try:
        # The engine resolved the CDI name: the device node and the spec's edits are in the
        # container, which a CUDA_VISIBLE_DEVICES alone would not do.
        assert os.path.exists(f"/proc/{gpu_host.pid}/root{node}")
        assert f"TFPLATFORM_TEST_GPU={gpu_uuid}" in _environ(gpu_host.pid)
        # Named by UUID: inside, the engine numbers the container's GPUs from 0.
        assert f"CUDA_VISIBLE_DEVICES={gpu_uuid}" in _environ(gpu_host.pid)
        assert not os.path.exists(f"/proc/{cpu_host.pid}/root{node}")
        assert not any(v.startswith("TFPLATFORM_TEST_GPU=") for v in _environ(cpu_host.pid))
    finally:
        for host in (gpu_host, cpu_host):
            host.kill()
            host.wait(timeout=30)


def test_a_gpu_the_engine_cannot_resolve_fails_the_start_clearly(
    engine_settings: ContainerSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from docker.errors import APIError

    monkeypatch.setattr(containers, "gpu_uuids", lambda *, indices: ("GPU-not-on-this-node",))
    podman = runtime_for(name="podman", containers=engine_settings)
    with pytest.raises(APIError, match=r"nvidia\.com/gpu=GPU-not-on-this-node"):
        _start(podman, tmp_path, gpus=(0,))


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_each_engine_api_creates_the_same_locked_down_container(
    engine: str, engine_settings: ContainerSettings, tmp_path: Path
) -> None:
    """`docker` goes through the Docker API, which podman's compatible service also speaks."""
    host = _start(runtime_for(name=engine, containers=engine_settings), tmp_path)
    try:
        found = engine_settings.client().containers.get(host.container.id)
        assert found.labels[LABEL_NODE] == engine_settings.node
        config = found.attrs["HostConfig"]
        assert found.attrs["Config"]["User"] == "1000:1000"
        assert config["ReadonlyRootfs"] is True
        assert "no-new-privileges" in " ".join(config["SecurityOpt"] or [])
        assert (config["PidsLimit"], config["Memory"], config["MemorySwap"]) == (
            512, 2**30, 2**30)
        assert config["NetworkMode"] == "none" and config["Devices"] in (None, [])
        status = Path(f"/proc/{host.pid}/status").read_text()
        assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status
        assert Path(f"/proc/{host.pid}/limits").read_text().split("Max processes")[1].split()[
            :2] == ["512", "512"]
    finally:
        host.kill()
        host.wait(timeout=30)


def test_both_translations_hand_over_the_same_gpus_and_limits(
    engine_settings: ContainerSettings,
) -> None:
    request = ContainerRequest(
        image="img", command=("python3",), user="1000:1000", mounts=(), tmpfs={}, env={},
        work_dir="/", labels={}, hostname="trial", network="none", memory_bytes=2**30,
        nano_cpus=1_500_000_000, gpu_uuids=("GPU-a", "GPU-b"))
    spec = libpod_spec(request=request)
    assert spec["devices"] == [{"path": "nvidia.com/gpu=GPU-a"}, {"path": "nvidia.com/gpu=GPU-b"}]
    assert spec["resource_limits"]["cpu"] == {"shares": 1024, "period": 100_000,
                                              "quota": 150_000}
    arguments = docker_arguments(client=engine_settings.client(), request=request,
                                 podman=engine_settings.engine().podman)
    [device_request] = arguments["device_requests"]
    assert device_request["Driver"] == "nvidia"
    assert device_request["DeviceIDs"] == ["GPU-a", "GPU-b"]
    assert arguments["nano_cpus"] == 1_500_000_000
    assert arguments["mem_limit"] == arguments["memswap_limit"] == 2**30


class RecordingRelay:
    """A Unix socket relaying to the engine's, noting each HTTP request line it carries."""

    REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1\.1\r\n")

    def __init__(self, *, engine_url: str, folder: Path) -> None:
        self.engine = engine_url.removeprefix("unix://")
        self.path = folder / "relay.sock"
        self.sent: list[bytearray] = []  # per connection
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def paths(self) -> list[str]:
        return [path.decode() for sent in self.sent
                for path in self.REQUEST_LINE.findall(bytes(sent))]

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.engine)
            self.sent.append(sent := bytearray())
            threading.Thread(target=self._pipe, args=(client, engine, sent), daemon=True).start()
            threading.Thread(target=self._pipe, args=(engine, client, None), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, sent: bytearray | None) -> None:
        with source, sink, contextlib.suppress(OSError):  # the other direction closed both
            while chunk := source.recv(65536):
                if sent is not None:
                    sent += chunk
                sink.sendall(chunk)

    def close(self) -> None:
        self.server.close()


def test_a_node_asks_the_engine_for_its_version_once_not_per_container(
    engine_settings: ContainerSettings, tmp_path: Path
) -> None:
    """podman answers every `GET /version` by looking up its components' packages (about
    0.2 CPU-s); docker-py asks it for each client it makes unless told the API version."""
    relay = RecordingRelay(engine_url=engine_settings.engine_url, folder=tmp_path)
    settings = dataclasses.replace(engine_settings, engine_url=relay.url)
    try:
        for engine in ("podman", "docker", "docker"):
            host = _start(runtime_for(name=engine, containers=settings), tmp_path)
            host.kill()
            host.wait(timeout=30)
        identity = settings.engine()
        assert identity.podman
        assert identity.api_version == settings.client().version()["ApiVersion"]
    finally:
        relay.close()
    versions = [path for path in relay.paths() if path.split("?")[0].endswith("/version")]
    # The identity, asked once, and the `client().version()` just above.
    assert len(versions) == 2, relay.paths()
    assert sum("/containers/create" in path for path in relay.paths()) == 3
