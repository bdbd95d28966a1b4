"""The podman trial runtime: each task a container of its environment's image, through the
engine's API, as uid 1000 without capabilities, network or a writable root; gone when it ends."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.images import OWN_PYTHON_PACKAGES
from training.isolation.container_settings import GANG_NETWORK_PREFIX
from training.isolation.containers import (
    LABEL_NODE,
    LABEL_TASK,
    LABEL_TRIAL,
    RUNTIME_IMAGE,
    ContainerSettings,
    containers_reap,
    gang_network_ensure,
    gang_network_name,
    gang_network_release,
    runtime_image_ensure,
)
from training.isolation.runtime import Runtime
from training.isolation.runtime_factory import runtime_for
from training.isolation.sandbox import Exposure
from training.spec import Resources
from training.supervisor.supervise import task_base_environment, trial_supervise
from training.tf_config import ClusterPlan, TaskAddress, ports_free

pytestmark = pytest.mark.slow

PROBE_MODULE = '''
import os, socket
import tf_keras as keras

status = open("/proc/self/status").read()
capabilities = status.split("CapEff:")[1].split()[0]
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    network = "reachable"
except OSError:
    network = "unreachable"
try:
    open("/usr/probe", "w")
    root = "writable"
except OSError:
    root = "read-only"
print(f"PROBE uid={os.getuid()} caps={capabilities} network={network} root={root} "
      f"pidns={os.readlink('/proc/self/ns/pid')}", flush=True)


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
'''


@pytest.fixture(scope="module")
def podman(podman_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    node = f"test-{tmp_path_factory.getbasetemp().name}"
    settings = ContainerSettings(engine_url=podman_engine, node=node, oci_runtime="runc",
                                 memory_bytes=2 * 2**30)
    assert runtime_image_ensure(settings=settings) == RUNTIME_IMAGE
    yield runtime_for(name="podman", containers=settings)
    containers_reap(settings=settings)


def _node_containers(runtime: Runtime) -> list[Any]:
    assert runtime.containers is not None
    return runtime.containers.client().containers.list(
        all=True, filters={"label": f"{LABEL_NODE}={runtime.containers.node}"}
    )


def _run(runtime: Runtime, make_spec: Callable[..., Any], tmp_path: Path, model: str,
         **options: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    spec = make_spec(work_dir=tmp_path / "work", model=model, **options)
    outcome = trial_supervise(spec=spec, on_events=events.extend, should_cancel=lambda: False,
                              grace_seconds=10, runtime=runtime, run_dir=str(tmp_path / "runs"))
    return outcome, events


def test_a_trial_trains_in_a_locked_down_container(
    podman: Runtime, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    module = tmp_path / "probe.py"
    module.write_text(PROBE_MODULE)
    outcome, events = _run(podman, make_spec, tmp_path, str(module),
                           hyperparameters={"epochs": 1})

    assert outcome.status == "completed", outcome.exit_reason
    [launching] = [e.payload for e in events if e.payload.get("phase") == "launching"]
    assert launching["runtime"] == "podman" and launching["isolated"] is True
    [probe] = [e.payload["message"] for e in events
               if str(e.payload.get("message", "")).startswith("PROBE ")]
    assert "uid=1000 caps=0000000000000000 network=unreachable root=read-only" in probe
    # Its own pid namespace; the task may be a fork of a warm host, so not necessarily pid 1.
    assert "pidns=pid:[" in probe and f"pidns={os.readlink('/proc/self/ns/pid')}" not in probe
    assert (tmp_path / "work" / "export").is_dir()  # written through its own work dir
    assert _node_containers(podman) == []  # removed once it exited


def test_a_cancel_removes_the_container_and_all_it_started(
    podman: Runtime, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    events: list[Any] = []
    spec = make_spec(work_dir=tmp_path / "work", model="mlp", hyperparameters={"epochs": 500})
    seen_loss = lambda: any(e.kind == "metric" for e in events)  # noqa: E731
    outcome = trial_supervise(spec=spec, on_events=events.extend, should_cancel=seen_loss,
                              grace_seconds=2, runtime=podman, run_dir=str(tmp_path / "runs"))
    assert outcome.status == "canceled", outcome.exit_reason
    assert _node_containers(podman) == []


def test_two_tasks_of_one_trial_share_only_their_own_loopback(
    podman: Runtime, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    outcome, events = _run(podman, make_spec, tmp_path, "mlp",
                           hyperparameters={"epochs": 1},
                           resources=Resources(workers=2, gpus_per_worker=0))
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.strategy == "MultiWorkerMirroredStrategy"
    [launched] = [e.payload["tasks"] for e in events if e.payload.get("phase") == "launched"]
    assert len({task["host"] for task in launched}) == 2  # two containers, one loopback


GANG_PROBE_MODULE = '''
import socket, time
import tf_keras as keras


def resolve(name):
    for _ in range(600):  # the other node's container may not have joined yet
        try:
            return socket.gethostbyname(name)
        except OSError:
            time.sleep(0.2)
    return None


def build_model(hparams):
    names = sorted(n for n in ("gang-node-a", "gang-node-b") if resolve(n))
    with open("/proc/net/route") as routes:
        default_route = any(line.split()[1] == "00000000" for line in routes.readlines()[1:])
    print(f"GANG resolved={names} default_route={default_route}", flush=True)
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
'''


def test_a_gang_across_nodes_on_one_engine_gets_an_internal_network_of_its_own(
    podman_engine: str, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    """Two nodes starting containers on one engine (compose): their tasks find each other by
    node address on the gang's own network, which has no route out and goes with them."""
    import threading

    module = tmp_path / "gang.py"
    module.write_text(GANG_PROBE_MODULE)
    spec = make_spec(work_dir=tmp_path / "work", model=str(module),
                     hyperparameters={"epochs": 1},
                     resources=Resources(workers=2, gpus_per_worker=0))
    ports = ports_free(host="127.0.0.1", count=2)  # a plan, and so a network, of its own
    plan = ClusterPlan((TaskAddress("worker", 0, "gang-node-a", ports[0]),
                        TaskAddress("worker", 1, "gang-node-b", ports[1])),
                       dispatch_key=str(time.time()))
    network = gang_network_name(trial_id=spec.trial_id, plan=plan)
    outcomes: dict[str, Any] = {}
    events: list[Any] = []
    seen: list[dict[str, Any]] = []

    def node(address: str) -> None:
        settings = ContainerSettings(engine_url=podman_engine, node=f"{address}-{tmp_path.name}",
                                     oci_runtime="runc", gang_network="gang")
        outcomes[address] = trial_supervise(
            spec=spec, on_events=events.extend, should_cancel=lambda: False, grace_seconds=10,
            cluster=plan, local_host=address, run_dir=str(tmp_path / f"runs-{address}"),
            runtime=runtime_for(name="podman", containers=settings))

    threads = [threading.Thread(target=node, args=(a,)) for a in ("gang-node-a", "gang-node-b")]
    for thread in threads:
        thread.start()
    client = ContainerSettings(engine_url=podman_engine, node="observer").client()
    while any(t.is_alive() for t in threads):
        seen += [n.attrs for n in client.networks.list(names=[network])]
        threads[0].join(timeout=1)
    for thread in threads:
        thread.join()

    assert [o.status for o in outcomes.values()] == ["completed", "completed"], [
        o.exit_reason for o in outcomes.values()]
    assert seen and all(attrs["Internal"] for attrs in seen)
    probes = [e.payload["message"] for e in events
              if str(e.payload.get("message", "")).startswith("GANG ")]
    # Each task builds the model (the chief once more for its export).
    assert len(probes) >= 2
    assert set(probes) == {"GANG resolved=['gang-node-a', 'gang-node-b'] default_route=False"}
    assert client.networks.list(names=[network]) == []  # gone with the gang's last container


def test_a_restarted_node_reaps_what_it_left_running(
    podman: Runtime, tmp_path: Path
) -> None:
    from training.isolation.runtime import TaskPython
    from training.supervisor.hosts import host_start

    host = host_start(runtime=podman, python=TaskPython(), env=task_base_environment(),
                      exposure=Exposure(), log=tmp_path / "host.log", cwd=tmp_path,
                      labels={LABEL_TRIAL: "7", LABEL_TASK: "worker:0"})
    [found] = _node_containers(podman)
    assert found.labels[LABEL_TRIAL] == "7" and found.labels[LABEL_TASK] == "worker:0"
    assert found.attrs["HostConfig"]["ReadonlyRootfs"] is True
    limits = found.attrs["HostConfig"]
    assert (limits["PidsLimit"], limits["Memory"], limits["CpuShares"]) == (4096, 2**31, 1024)
    assert limits["NanoCpus"] == 0  # a weight, not a quota, unless the node sets one

    assert podman.containers is not None
    assert host.poll() is None
    assert containers_reap(settings=podman.containers) == 1
    host.wait(timeout=30)  # its supervisor learns that it is gone
    assert host.poll() is not None
    assert _node_containers(podman) == []


def test_a_reap_leaves_the_gang_network_another_node_has_just_made(
    podman: Runtime, tmp_path: Path
) -> None:
    # Nodes share one engine: this one restarts (and reaps) while another has made its gang's
    # network and not yet started the gang's first container in it.
    assert podman.containers is not None
    name = gang_network_ensure(settings=podman.containers,
                               name=f"{GANG_NETWORK_PREFIX}{tmp_path.name}", trial_id="8")
    try:
        containers_reap(settings=podman.containers)
        assert podman.containers.client().networks.list(names=[name]) != []
    finally:
        gang_network_release(settings=podman.containers, name=name)
    assert podman.containers.client().networks.list(names=[name]) == []


def test_a_trial_trains_in_an_image_that_brings_its_own_python(
    podman: Runtime, python_image: str, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    """Debian's Python with TensorFlow installed by the derived build: the harness comes from
    /opt/tfplatform, nothing of the node's runtime is mounted."""
    from training.isolation.images import image_derive, image_key

    assert podman.containers is not None
    packages = OWN_PYTHON_PACKAGES  # JupyterLab too: test_workspace_containers.py shares it
    key = image_key(settings=podman.containers, base=python_image, packages=packages)
    python = image_derive(settings=podman.containers, base=python_image, packages=packages,
                          key=key, log_path=tmp_path / "build.log")
    module = tmp_path / "where.py"
    module.write_text(PROBE_MODULE + (
        "\nimport sys, training\n"
        "print('RUNTIME', sys.executable, sys.version_info[:2], training.__file__, flush=True)\n"
    ))
    events: list[Any] = []
    spec = make_spec(work_dir=tmp_path / "work", model=str(module), hyperparameters={"epochs": 1})
    outcome = trial_supervise(spec=spec, on_events=events.extend, should_cancel=lambda: False,
                              grace_seconds=10, runtime=podman, python=python,
                              run_dir=str(tmp_path / "runs"))

    assert outcome.status == "completed", outcome.exit_reason
    [runtime] = [e.payload["message"] for e in events
                 if str(e.payload.get("message", "")).startswith("RUNTIME ")]
    assert runtime.startswith("RUNTIME /usr/bin/python3 (3, 11) /opt/tfplatform/training/")
    [probe] = [e.payload["message"] for e in events
               if str(e.payload.get("message", "")).startswith("PROBE ")]
    assert "uid=1000 caps=0000000000000000 network=unreachable root=read-only" in probe
    # Its own Python has no tensorboard: training goes on without event files, and says so.
    assert any("no tensorboard package" in str(e.payload.get("message", "")) for e in events)


def test_a_dataset_folder_is_bound_as_checked_not_a_link_swapped_in_after(
    podman: Runtime, tmp_path: Path
) -> None:
    """The node opens the folder with no link followed and has the engine bind that opened
    folder: a link swapped in after the check redirects nothing; one there before is refused."""
    from training.errors import InvalidInput
    from training.isolation.containers import container_host_start, container_visible
    from training.isolation.dataset_mounts import mounts_open
    from training.isolation.runtime import TaskPython

    assert podman.containers is not None
    root, train = tmp_path / "root", tmp_path / "root" / "a" / "ds" / "train"
    train.mkdir(parents=True)
    (train / "part-0").write_bytes(b"")
    (root / "b" / "secret" / "train").mkdir(parents=True)
    (root / "b" / "secret" / "train" / "b-only").write_bytes(b"")
    exposure = Exposure(read=(str(train),), pinned=(str(train),), pin_roots=(str(root),))

    def listed(name: str, exposure: Exposure, pins: dict[str, int] | None = None) -> list[str]:
        host = container_host_start(
            settings=podman.containers, engine="podman", python=TaskPython(),
            env=task_base_environment(), exposure=exposure, log=tmp_path / f"{name}.log",
            channel=tmp_path / f"{name}.channel", pinned_fds=pins)
        try:
            # The node tells its container's process from another of that number (a node in a
            # pid namespace of its own would see another or none), by the channel it shows.
            channel = tmp_path / f"{name}.channel"
            assert container_visible(pid=host.pid, channel=channel)
            assert not container_visible(pid=os.getpid(), channel=channel)
            return sorted(os.listdir(f"/proc/{host.pid}/root{train}"))
        finally:
            host.kill()
            host.wait(timeout=60)

    pins = mounts_open(paths=[str(train)], roots=[str(root)])
    try:
        (root / "a" / "ds").rename(tmp_path / "moved")  # swapped after the check
        (root / "a" / "ds").symlink_to(root / "b" / "secret")
        assert listed("pinned", exposure, pins) == ["part-0"]
    finally:
        for fd in pins.values():
            os.close(fd)
    # By name, the bind follows the link into team b's folder.
    assert listed("by-name", Exposure(read=(str(train),))) == ["b-only"]
    with pytest.raises(InvalidInput, match="symbolic link"):  # opened now: refused, not started
        listed("refused", exposure)
    assert _node_containers(podman) == []
    assert not list(tmp_path.glob("*.pins"))  # the staging mounts are gone with their folders


def test_a_trial_on_a_registered_dataset_trains_in_a_container(
    podman: Runtime, make_spec: Callable[..., Any], tmp_path: Path,
    write_team_dataset: Callable[[Path], Any],
) -> None:
    source = write_team_dataset(tmp_path / "root")
    outcome, _ = _run(podman, make_spec, tmp_path, "mlp", dataset="team-data",
                      dataset_source=source.to_dict(), dataset_roots=[str(tmp_path / "root")],
                      hyperparameters={"epochs": 1, "batch_size": 16})
    assert outcome.status == "completed", outcome.exit_reason
    assert (tmp_path / "work" / "export").is_dir()


def test_a_warm_container_holds_nothing_of_anyone_until_its_order(
    podman: Runtime, make_spec: Callable[..., Any], tmp_path: Path
) -> None:
    """It starts with empty folders of root's at the data roots; at its order the node mounts
    the task's own work dir (and what it reads) into it, and nothing else."""
    from training.supervisor.warm import warm_pool_configure

    work, models = tmp_path / "work", tmp_path / "models"
    other = work / "experiment-other"
    other.mkdir(parents=True)
    (other / "checkpoint").write_text("another tenant's")
    models.mkdir()
    module = models / "probe.py"
    module.write_text(PROBE_MODULE + (
        # Landlock lets it list nothing but its own; a path's existence it does not hide.
        f"\nprint('NEIGHBOURS', os.path.exists({str(other)!r}), os.path.exists('.'), "
        "flush=True)\n"))
    pool = warm_pool_configure(size=1, runtime=podman, env=task_base_environment(),
                               exposure=Exposure(write=(str(work),), read=(str(models),)),
                               log_dir=tmp_path / "warm")
    try:
        assert pool is not None and pool.inject, "the suite runs as root: mounts are injected"
        deadline = time.monotonic() + 60
        while not (ready := pool.ready_pids()) and time.monotonic() < deadline:
            time.sleep(0.2)
        [pid] = ready
        root = Path(f"/proc/{pid}/root")
        for folder in (work, models):
            assert list((root / str(folder).lstrip("/")).iterdir()) == []
        mounts = {line.split(" - ")[0].split()[4]: line.split(" - ")[1].split()[0]
                  for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}
        assert mounts[str(work)] == mounts[str(models)] == "tmpfs"
        assert not any(point.startswith(f"{work}/") for point in mounts)

        events: list[Any] = []
        spec = make_spec(work_dir=work / "experiment-mine", model=str(module),
                         hyperparameters={"epochs": 1})
        outcome = trial_supervise(spec=spec, on_events=events.extend,
                                  should_cancel=lambda: False, grace_seconds=10,
                                  runtime=podman, run_dir=str(tmp_path / "runs"))
    finally:
        warm_pool_configure(size=0, runtime=podman, env={}, exposure=Exposure(),
                            log_dir=tmp_path / "warm")
    assert outcome.status == "completed", outcome.exit_reason
    [launched] = [task for e in events if e.payload.get("phase") == "launched"
                  for task in e.payload["tasks"]]
    assert launched["warm"] is True
    [neighbours] = {str(e.payload["message"]) for e in events
                    if str(e.payload.get("message", "")).startswith("NEIGHBOURS ")}
    assert neighbours == "NEIGHBOURS False True"
    assert (work / "experiment-mine" / "export").is_dir()
    assert (other / "checkpoint").read_text() == "another tenant's"


def test_a_node_that_cannot_mount_into_containers_keeps_no_warm_ones(
    podman: Runtime, tmp_path: Path
) -> None:
    """Not root: a warm container would have to hold every tenant's folders; none is kept."""
    from training.isolation.runtime import TaskPython
    from training.supervisor.warm import WarmPool

    work = tmp_path / "work"
    work.mkdir()
    pool = WarmPool(size=1, runtime=podman, env=task_base_environment(),
                    exposure=Exposure(write=(str(work),)), log_dir=tmp_path / "warm",
                    inject=False)
    try:
        time.sleep(2)  # what its spawner would have started by now
        assert pool.size == 0 and _node_containers(podman) == []
        assert pool.take(python=TaskPython(), write=(str(work / "mine"),), read=()) is None
    finally:
        pool.close()
