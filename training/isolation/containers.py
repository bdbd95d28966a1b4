"""Task hosts as containers of an environment's image: the `docker` and `podman` runtimes.

Each task host is one container, started through the engine's API (container_create.py: docker's
through docker-py, podman's through libpod's, which resolves CDI GPUs), labelled with its node,
trial and task so that a restarted worker node finds and removes what it left behind. Every
container runs as uid 1000 with no capabilities, `no-new-privileges`, a read-only root, a private
/tmp, memory, pids and CPU limits, and no network: a single-node trial's tasks share the first
one's loopback-only network namespace. A gang across nodes gets, where all nodes share one engine
(compose), an internal network of its own, each node's tasks reached there by the node's address;
where they do not (nodes on several machines), under podman on a node run as root, the gang's
network namespace on this node (gang_network.py, as a sandbox's), else the host's network,
narrowed to its own ports by Landlock (`confinement/`), which a container applies at hand-off like a
sandbox does.

The order reaches a running container through its channel: a directory the node mounts at
/run/tfplatform, owned by root and read-only to the task, holding the task's events file and
log (pre-created, the only files there it may write) and, at hand-off, `order.json`. The
supervisor links those two files into its attempt directory, so it reads what this task wrote
and nothing the task could name.

Data: a trial's work dir read-write, what it reads read-only; a registered dataset's folders
are opened on the node with no link followed below their roots (dataset_mounts.py) and bound as
opened, never by name (`_pins_staged`). A warm container (warm.py) starts with none of it: empty
tmpfs folders of root's at the data roots, into which the node mounts its task's folders when
its order comes (mounts.py), through the container's pid.

Images: an image labelled `tfplatform.python=host` (the node's own, built by
`runtime_image_ensure` from an empty root filesystem) runs the node's Python runtime, mounted
read-only under its own paths, as a sandbox does. Any other image brings its own Python and the
harness: a derived image has `training/` and `confinement/` baked in at /opt/tfplatform
(images.py), the platform's own image has them at /app. Nothing of the node's files but the
trial's own data is mounted then, so a worker node that is itself a container can start them
(data paths the same on the host and in the worker).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.errors import InvalidInput
from training.isolation.container_create import BindMount, ContainerRequest, container_create
from training.isolation.container_settings import (
    GANG_NETWORK_PREFIX,
    RUNTIME_IMAGE,
    ContainerSettings,
)
from training.isolation.dataset_mounts import mounts_open
from training.isolation.mounts import mount_stage, mount_unstage
from training.isolation.private_files import private_write_text
from training.isolation.runtime import USR_MERGED, TaskPython, node_privileged
from training.isolation.sandbox import (
    ETC_FILES,
    PRIVATE_TMP,
    SANDBOX_UID,
    Exposure,
    runtime_paths,
)
from training.isolation.seccomp import seccomp_profile_write
from training.tf_config import ClusterPlan

if TYPE_CHECKING:
    from docker.models.containers import Container

LABEL_NODE = "tfplatform.node"
LABEL_TRIAL = "tfplatform.trial"
LABEL_TASK = "tfplatform.task"
LABEL_PYTHON = "tfplatform.python"
CHANNEL = "/run/tfplatform"
EVENTS_FILE, LOG_FILE, ORDER_FILE = "events.jsonl", "task.log", "order.json"
TMP_SIZE = "2g"
MOUNT_POINTS_SIZE = "1m"
CPU_SHARES_PER_SLOT = 1024
EXIT_WATCH_SECONDS = 0.1
EXIT_POLL_SECONDS = 0.5


def engine_check(*, settings: ContainerSettings) -> None:
    """Fails clearly when the node cannot reach its engine (`GET /_ping`: podman answers
    `/version` by looking up its packages, engine_identify)."""
    try:
        settings.client().ping()
    except Exception as error:  # docker-py raises several kinds for "not there"
        raise InvalidInput(
            f"The container runtime cannot reach its engine at {settings.engine_url}: {error}. "
            "Start the engine's API (e.g. `podman system service --time=0 "
            "unix:///run/podman/podman.sock`) or set PLATFORM_CONTAINER_ENGINE_URL."
        ) from error


def runtime_image_ensure(*, settings: ContainerSettings) -> str:
    """The node's own image: an empty root filesystem for the node's mounted Python runtime."""
    client = settings.client()
    with contextlib.suppress(Exception):
        client.images.get(RUNTIME_IMAGE)
        return RUNTIME_IMAGE
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        _tar_add(tar, "Containerfile", "FROM scratch\nCOPY rootfs/ /\n"
                 f"LABEL {LABEL_PYTHON}=host\nUSER {SANDBOX_UID}:{SANDBOX_UID}\n".encode())
        _tar_add(tar, "rootfs/etc/passwd",
                 f"trial:x:{SANDBOX_UID}:{SANDBOX_UID}:trial:{PRIVATE_TMP}:/nonexistent\n".encode())
        _tar_add(tar, "rootfs/etc/group", f"trial:x:{SANDBOX_UID}:\n".encode())
        for name in ("tmp", "usr", "proc", "sys", "dev", "run", "opt", "etc/ssl"):
            _tar_dir(tar, f"rootfs/{name}")
        for name in USR_MERGED:  # the same layout as the node's, whose /usr is mounted
            target = Path("/") / name
            if target.is_symlink():
                info = tarfile.TarInfo(f"rootfs/{name}")
                info.type, info.linkname = tarfile.SYMTYPE, str(target.readlink())
                tar.addfile(info)
            else:
                _tar_dir(tar, f"rootfs/{name}")
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=RUNTIME_IMAGE,
                        dockerfile="Containerfile", rm=True)
    return RUNTIME_IMAGE


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _tar_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name.endswith("tmp") else 0o755
    tar.addfile(info)


def image_runs_host_python(*, settings: ContainerSettings, image: str) -> bool:
    try:
        labels = settings.client().images.get(image).labels or {}
    except Exception as error:
        raise InvalidInput(
            f"Image {image!r} is not on node {settings.node} and could not be inspected: {error}"
        ) from error
    return labels.get(LABEL_PYTHON) == "host"


# An unused gang network younger than this is left to a later reap (podman's `until` filter).
GANG_NETWORK_PRUNE_AGE = "10m"


def containers_reap(*, settings: ContainerSettings) -> int:
    """Removes every container this node started (a restarted node supervises none of them),
    and gang networks nothing uses any more."""
    client = settings.client()
    found = client.containers.list(all=True, filters={"label": f"{LABEL_NODE}={settings.node}"})
    for container in found:
        with contextlib.suppress(Exception):
            container.remove(force=True)
    with contextlib.suppress(Exception):
        # Nodes share an engine: a gang network another node made a moment ago has no
        # container yet, and pruning it would fail that gang's start. Old unused ones only.
        client.networks.prune(filters={"label": LABEL_TRIAL, "until": GANG_NETWORK_PRUNE_AGE})
    return len(found)



def gang_network_name(*, trial_id: str, plan: ClusterPlan) -> str:
    """The same on every node of one dispatch (its plan: nodes, ports and dispatch key), new for
    the next. Never reused: podman 4.3's DNS keeps names of a removed network's containers, so
    a network made again under an old name can resolve a gang member to a dead address."""
    digest = hashlib.sha256((plan.to_json() + plan.dispatch_key).encode()).hexdigest()[:10]
    return f"{GANG_NETWORK_PREFIX}{trial_id}-{digest}"


def gang_network_ensure(*, settings: ContainerSettings, name: str, trial_id: str) -> str:
    """An internal network (no route out) for one gang; the other nodes may be making it too."""
    client = settings.client()
    try:
        client.networks.create(name, driver="bridge", internal=True, check_duplicate=True,
                               labels={LABEL_TRIAL: trial_id})
    except Exception:
        client.networks.get(name)  # made by another node meanwhile; anything else fails here
    return name


def gang_network_release(*, settings: ContainerSettings, name: str) -> None:
    """Removes the gang's network once its last container has gone (an engine refuses before)."""
    with contextlib.suppress(Exception):
        settings.client().networks.get(name).remove()


def gpu_uuids(*, indices: tuple[int, ...]) -> tuple[str, ...]:
    """The node's GPUs by UUID (what engines hand over); none where NVML is absent (emulated)."""
    if not indices:
        return ()
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return ()
    try:
        return tuple(
            str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in indices
        )
    finally:
        pynvml.nvmlShutdown()


class ContainerHost:
    """The TaskHost interface (hosts.py) over one container."""

    sandboxed = True
    forked = False

    def __init__(self, *, container: Container, settings: ContainerSettings, channel: Path,
                 python: TaskPython, exposure: Exposure, network: str, log: Path) -> None:
        self.container, self.settings = container, settings
        self.channel, self.python = channel, python
        self.exposure, self.network = exposure, network
        self._log = log
        self._returncode: int | None = None
        self._exited = threading.Event()
        container.reload()
        self._pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        threading.Thread(target=self._wait, name="container-wait", daemon=True).start()

    def _wait(self) -> None:
        code = -1
        try:
            code = self._exit_wait()
        except Exception:
            code = -1  # removed meanwhile (reaped), or the engine is gone
        finally:
            with contextlib.suppress(Exception), self._log.open("ab") as log:
                log.write(self.container.logs())  # what it printed before (or without) an order
            gang = self.network.startswith(GANG_NETWORK_PREFIX)
            if gang:  # before removal: podman 4.3 may otherwise leave its name in the DNS
                with contextlib.suppress(Exception):
                    self.settings.client().networks.get(self.network).disconnect(
                        self.container, force=True)
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            if gang:
                gang_network_release(settings=self.settings, name=self.network)
            # The task's events and log live on as the supervisor's links to them.
            shutil.rmtree(self.channel, ignore_errors=True)
            self._returncode = code
            self._exited.set()

    def _exit_wait(self) -> int:
        """The container's exit code, once it has exited.

        Not the engine's wait call: podman 4.3's spins a core for as long as it waits. The
        container's first process is watched in /proc instead (where the node sees it), then
        the engine asked for the code; elsewhere its state is polled.
        """
        started = _start_time(self._pid)
        while started is not None and _start_time(self._pid) == started:
            time.sleep(EXIT_WATCH_SECONDS)
        while True:
            self.container.reload()
            state = self.container.attrs.get("State", {})
            if not state.get("Running") and state.get("Status") != "created":
                return int(state.get("ExitCode", -1))
            time.sleep(EXIT_POLL_SECONDS)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def network_ref(self) -> str:
        """What a second task of the same trial on this node joins: this one's network."""
        return "host" if self.network == "host" else f"container:{self.container.id}"

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def poll(self) -> int | None:
        return self._returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(cmd=str(self.container.id), timeout=timeout or 0)
        return self._returncode if self._returncode is not None else -1

    def hand(self, *, order: dict[str, Any], events: Path, log: Path) -> bool:
        if self._exited.is_set():
            return False
        work_dir_own(path=Path(order["cwd"]))
        for name, link in ((EVENTS_FILE, events), (LOG_FILE, log)):
            link.unlink(missing_ok=True)
            os.link(self.channel / name, link)
        order_write(channel=self.channel, order=order)
        return True

    def close(self) -> None:
        self.kill()

    def task_pid(self) -> int | None:
        return self._pid or None

    def terminate(self) -> None:
        with contextlib.suppress(Exception):
            self.container.kill(signal="SIGTERM")

    def kill(self) -> None:
        """The container's whole pid namespace goes, double forks included."""
        with contextlib.suppress(Exception):
            self.container.kill(signal="SIGKILL")


def _start_time(pid: int) -> str | None:
    """A process's start time (it tells a pid's reuse apart), None once it is gone."""
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def work_dir_own(*, path: Path) -> None:
    """The task runs as uid 1000, not as a user-namespaced root as in a sandbox: its own work dir
    (and only that; other trials' stay the node's) becomes its to write, links not followed."""
    path.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(path):
        for name in (root, *(os.path.join(root, n) for n in dirs + files)):
            os.chown(name, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)


def order_write(*, channel: Path, order: dict[str, Any]) -> None:
    """The order appears in the channel whole (by rename), never half-written. It holds the
    task's tokens: only the task's user reads it, as only it writes the events."""
    staged = channel / f".{ORDER_FILE}"
    staged.unlink(missing_ok=True)
    private_write_text(path=staged, text=json.dumps(order))
    os.chown(staged, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
    staged.rename(channel / ORDER_FILE)


def _channel_prepare(*, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    for name in (EVENTS_FILE, LOG_FILE):
        file = path / name
        file.touch(mode=0o600)
        os.chown(file, SANDBOX_UID, SANDBOX_UID)


def _mounts(*, python: TaskPython, host_python: bool, exposure: Exposure, channel: Path,
            staged: Mapping[str, str]) -> tuple[BindMount, ...]:
    def bind(source: str, target: str | None = None, *, read_only: bool = True) -> BindMount:
        return BindMount(source=source, target=target or source, read_only=read_only)

    mounts = [bind(str(channel), CHANNEL, read_only=False)]
    if host_python:

        mounts.append(bind("/usr"))
        mounts += [bind(f"/{n}") for n in USR_MERGED
                   if Path(f"/{n}").is_dir() and not Path(f"/{n}").is_symlink()]
        mounts += [bind(p) for p in ETC_FILES
                   if os.path.exists(p) and p not in ("/etc/hosts", "/etc/resolv.conf")]
        mounts += [bind(p) for p in runtime_paths(python=python)]
    mounts += [bind(staged[p], p) if p in staged else bind(p)
               for p in exposure.read if os.path.exists(p)]
    mounts += [bind(p, read_only=False) for p in exposure.write if os.path.isdir(p)]
    return tuple(mounts)


@dataclass(frozen=True)
class _Pin:
    source: str  # where the engine binds it from
    device: int  # the checked folder's identity, for what the container then shows
    inode: int


@contextlib.contextmanager
def _pins_staged(*, exposure: Exposure, pinned_fds: Mapping[str, int] | None,
                 directory: Path) -> Iterator[dict[str, _Pin]]:
    """A registered dataset's folders, opened with no link followed (InvalidInput if one became
    a link: dataset_mounts.py) and attached by that descriptor in a folder only root can reach;
    the engine binds those (it takes names only, and a magic /proc/<pid>/fd link names a mount
    of the node's namespace, which runc refuses to bind in the container's). Detached again
    once the container has started: its own bind stays."""
    if not exposure.pinned:
        yield {}
        return
    if not node_privileged():
        raise InvalidInput(
            "This node cannot mount a registered dataset by descriptor (its worker is not "
            "root), and will not bind one by name, which a link swapped in could redirect.")
    pins = dict(pinned_fds) if pinned_fds is not None else mounts_open(
        paths=exposure.pinned, roots=exposure.pin_roots)
    directory.mkdir(mode=0o700)
    staged: dict[str, _Pin] = {}
    try:
        for number, (path, fd) in enumerate(pins.items()):
            target = directory / str(number)
            target.mkdir(mode=0o700)
            try:
                mount_stage(fd=fd, target=target)
            except OSError as error:  # e.g. a worker in a container of its own, without caps
                raise InvalidInput(
                    f"This node cannot mount the registered dataset folder {path} by descriptor "
                    f"({error.strerror}), and will not bind it by name.") from error
            checked = os.fstat(fd)
            staged[path] = _Pin(source=str(target), device=checked.st_dev, inode=checked.st_ino)
        yield staged
    finally:
        for pin in staged.values():
            with contextlib.suppress(OSError):
                mount_unstage(target=Path(pin.source))
        shutil.rmtree(directory, ignore_errors=True)  # empty folders once detached
        if pinned_fds is None:
            for fd in pins.values():
                os.close(fd)


def container_visible(*, pid: int, channel: Path) -> bool:
    """Whether /proc/<pid> here is that container (its channel is what it shows at CHANNEL):
    not where the node runs in a pid namespace of its own (a worker in compose), where that
    number is another process or none."""
    try:
        shown, own = os.stat(f"/proc/{pid}/root{CHANNEL}"), os.stat(channel)
    except OSError:
        return False
    return pid > 0 and (shown.st_dev, shown.st_ino) == (own.st_dev, own.st_ino)


def _pins_verify(*, pid: int, pins: Mapping[str, _Pin], channel: Path) -> None:
    """What the container shows at each dataset path is the folder that was checked (an engine
    in another mount namespace than the node's would bind the empty staging folder)."""
    if pins and not container_visible(pid=pid, channel=channel):
        raise InvalidInput("The node cannot see the task's container to check its dataset "
                           "mounts; the engine must share the node's namespaces.")
    for path, pin in pins.items():
        try:
            shown = os.stat(f"/proc/{pid}/root{path}")
        except OSError as error:
            raise InvalidInput(f"{path} is not mounted in the task's container: "
                               f"{error.strerror}") from error
        if (shown.st_dev, shown.st_ino) != (pin.device, pin.inode):
            raise InvalidInput(f"{path} in the task's container is not the dataset folder that "
                               "was checked; the engine must share the node's mount namespace.")


def container_host_start(*, settings: ContainerSettings, engine: str, python: TaskPython,
                         env: dict[str, str], exposure: Exposure, log: Path, channel: Path,
                         network: str = "none", network_alias: str = "",
                         labels: dict[str, str] | None = None,
                         gpus: tuple[int, ...] = (), slots: int = 1,
                         mount_points: tuple[str, ...] = (),
                         pinned_fds: Mapping[str, int] | None = None) -> ContainerHost:
    """One container of `python.image`, importing TensorFlow, waiting for its order.

    `exposure.pinned`: bound from the folders opened now (or from `pinned_fds`, the caller's),
    never by name. `mount_points`: empty folders (a warm container's) to mount a task's onto.

    `network`: "none", "host", "container:<id>" (another task's), "ns:<path>" (a gang's network
    namespace on this node, gang_network.py; podman), or a gang network, which it joins under
    `network_alias` (its node's address, what the gang's TF_CONFIG names).
    """
    image = python.image or settings.node_image
    host_python = image_runs_host_python(settings=settings, image=image)
    exposure = replace(exposure, write=tuple(p for p in exposure.write if os.path.isdir(p)),
                       read=tuple(p for p in exposure.read if os.path.exists(p)))
    _channel_prepare(path=channel)
    executable = python.executable if host_python else "python3"
    if network.startswith(GANG_NETWORK_PREFIX):
        gang_network_ensure(settings=settings, name=network, trial_id=(labels or {}).get(
            LABEL_TRIAL, ""))
    slots = max(1, len(gpus), slots)  # a task holds its GPUs, or its CPU slots
    uuids = gpu_uuids(indices=gpus)
    # The engine hands over only these, numbered from 0 inside: the node's indices would name
    # GPUs the container does not have. Their UUIDs name the same ones anywhere.
    env = env | ({"CUDA_VISIBLE_DEVICES": ",".join(uuids)} if uuids else {})
    with _pins_staged(exposure=exposure, pinned_fds=pinned_fds,
                      directory=Path(f"{channel}.pins")) as pins:
        request = ContainerRequest(
            image=image,
            command=(executable, "-m", "training.trial.host", "--channel-dir", CHANNEL),
            user=f"{SANDBOX_UID}:{SANDBOX_UID}",
            hostname=None if network.startswith("container:") else "trial",
            mounts=_mounts(python=python, host_python=host_python, exposure=exposure,
                           channel=channel, staged={p: pin.source for p, pin in pins.items()}),
            # A warm container's mount points: empty and root's, for the node to mount a
            # task's folders onto at its order (warm.py); the task cannot write there.
            tmpfs={PRIVATE_TMP: f"rw,size={TMP_SIZE},mode=1777",
                   **{path: f"rw,size={MOUNT_POINTS_SIZE},mode=755" for path in mount_points}},
            # An image with its own Python has the harness on its own PYTHONPATH (images.py).
            env=env if host_python else {k: v for k, v in env.items() if k != "PYTHONPATH"},
            work_dir=CHANNEL, labels={LABEL_NODE: settings.node, **(labels or {})},
            network=network, network_alias=network_alias,
            memory_bytes=settings.memory_bytes * slots, pids=settings.pids,
            # Cores are shared by weight (its slots), so an idle node's cores are not left
            # unused; a hard quota only where the node sets one.
            cpu_shares=CPU_SHARES_PER_SLOT * slots, nano_cpus=int(settings.cpus * slots * 1e9),
            oci_runtime=settings.oci_runtime, gpu_uuids=uuids,
            seccomp_profile=seccomp_profile_write(directory=log.parent),
        )
        container = container_create(settings=settings, engine=engine, request=request)
        host = ContainerHost(container=container, settings=settings, channel=channel,
                             python=python, exposure=exposure, network=network, log=log)
        try:
            _pins_verify(pid=host.pid, pins=pins, channel=channel)
            if mount_points and not container_visible(pid=host.pid, channel=channel):
                raise OSError("the node cannot see its containers' processes, so it cannot "
                              "mount a task's folders into a warm one")
        except (InvalidInput, OSError):
            host.kill()
            raise
    return host
