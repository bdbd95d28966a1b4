"""Runs one trial as a gang of OS processes and turns what they do into one `TrialOutcome`.

    trial_supervise(spec=..., on_events=..., should_cancel=...) -> TrialOutcome

Each attempt gets `<run_dir>/attempts/<n>/` holding the spec, the cluster layout, one events file
and one log (stdout+stderr) per task. `run_dir` is the supervisor's: a trial only ever gets its
own two files there, as open descriptors. Each task runs in a task host (hosts.py): a bubblewrap
sandbox confined to its own files and ports (the default), or a plain process (development),
warm from the node's pool when one is ready. Its environment is an allow-list: TF_CONFIG, its
devices and ids, nothing of the node's settings or secrets. What user code prints reaches the
trial's log stream as "log" events, up to a budget per attempt.

Gang semantics: the trial completes when every essential task (all workers; the chief under
parameter servers) exits 0; the first task to fail stops all others (SIGTERM, then SIGKILL after
`grace_seconds`), because synchronous training cannot continue without it. Cancel does the same.
A multi-node scheduler can pass the whole `cluster` and this node's `local_host`; only local tasks
are started here (in the gang's network namespace on this node, where the node runs as root:
gang_network.py, removed when the gang stops).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from confinement import TCP_PORTS_ABI
from training import catalog
from training.errors import InvalidInput, no_space
from training.events import EventTail, LineTail
from training.exit_codes import EXIT_NO_SPACE, EXIT_OK, EXIT_USER_ERROR, NO_SPACE_HINT
from training.isolation.container_create import NETNS_PATH_PREFIX
from training.isolation.container_settings import WORKSPACE_RELAY
from training.isolation.containers import (
    LABEL_TASK,
    LABEL_TRIAL,
    gang_network_name,
)
from training.isolation.gang_network import (
    GangNetwork,
    gang_network_create,
    gang_network_remove,
    node_ipv4,
)
from training.isolation.private_files import private_write_text
from training.isolation.runtime import (
    DEFAULT_RUNTIME,
    Runtime,
    TaskPython,
    node_privileged,
    repo_root,
)
from training.isolation.runtime_factory import runtime_for
from training.isolation.sandbox import (
    NETWORK_GANG,
    NETWORK_HOST,
    NETWORK_OWN,
    PRIVATE_TMP,
    SANDBOX_UID,
    SCRATCH,
    netns_ref,
    task_confinement,
    trial_exposure,
    trial_paths,
)
from training.signals import SUPERVISOR_PID_ENV
from training.spec import Resources, TrialEvent, TrialOutcome, TrialSpec
from training.supervisor.api_relay import API_SOCKET_ENV, ApiRelay
from training.supervisor.hosts import Host, host_start
from training.supervisor.outcome import OutcomeBuilder, exit_describe
from training.supervisor.warm import warm_pool
from training.tf_config import (
    LOCALHOST,
    ClusterPlan,
    TaskAddress,
    cluster_plan,
    gpu_ids_for,
    slots_for,
)

LOG_TAIL_LINES = 15
# What one attempt's tasks may print into the trial's log stream (the rest stays in their logs).
OUTPUT_LINES_MAX = 5000
OUTPUT_LINE_CHARS = 1000
# Node settings a task may see; anything else of the node's environment never reaches it.
PASSTHROUGH_ENV = (
    "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS",
    "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS", "TZ", "LANG", "LC_ALL",
)


@dataclass
class _Task:
    address: TaskAddress
    host: Host
    events: EventTail
    output: LineTail
    log_path: Path
    host_log_path: Path  # what a cold host printed before its order: sandbox set-up, imports
    warm: bool
    relay: ApiRelay | None = None
    exit_code: int | None = None
    exited_at: float = field(default=0.0)


def run_dir_default(*, work_dir: str) -> str:
    return f"{work_dir.rstrip('/')}.runs"


def attempt_dir_new(*, run_dir: str) -> Path:
    """`<run_dir>/attempts/<n>/`, n one more than the last attempt's."""
    root = Path(run_dir) / "attempts"
    root.mkdir(parents=True, exist_ok=True)
    while True:
        numbers = [int(p.name) for p in root.iterdir() if p.name.isdigit()]
        path = root / f"{max(numbers, default=0) + 1:03d}"
        try:
            path.mkdir()
        except FileExistsError:
            continue  # the other nodes of a gang share work_dir and start at the same moment
        return path


def task_base_environment(*, python: TaskPython | None = None) -> dict[str, str]:
    """What every task host of this node starts with (warm ones too): an allow-list."""
    env = {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("LANG", "C.UTF-8")
    executable = (python or TaskPython()).executable
    # An image's own "python3" is found on the image's PATH, its harness on its PYTHONPATH.
    own_image = not os.path.isabs(executable)
    bin_dirs = [] if own_image else [str(Path(executable).parent)]
    env |= {} if own_image else {"PYTHONPATH": str(repo_root())}
    return env | {
        "PATH": os.pathsep.join([*bin_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": PRIVATE_TMP,
        "USER": "trial",
        "TF_USE_LEGACY_KERAS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def gpu_share_environment(*, resources: Resources) -> dict[str, str]:
    """Where the node runs NVIDIA MPS, a share of a GPU is bounded by MPS as well: its pinned
    memory limit (device 0: the one GPU the task sees) and its share of the GPU's threads."""
    if not (resources.gpu_mps and resources.gpu_share_milli):
        return {}
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE":
           str(max(1, round(resources.gpu_share_milli / 10)))}
    if resources.gpu_memory_limit_mb:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={resources.gpu_memory_limit_mb}M"
    return env


def _environment(*, spec: TrialSpec, plan: ClusterPlan, task: TaskAddress, runtime: Runtime,
                 python: TaskPython, gpus: tuple[int, ...]) -> dict[str, str]:
    env = task_base_environment(python=python)
    # Empty hides every GPU: a CPU task must not grab GPU memory another trial was granted.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    # The indices are NVML's, which counts GPUs in PCI bus order; CUDA's own default order
    # (fastest first) would hand the task another trial's GPU on a mixed machine.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if gpus:
        env |= gpu_share_environment(resources=spec.resources)
    env["PLATFORM_TRIAL_ID"] = spec.trial_id
    env["PLATFORM_TASK"] = task.name
    if runtime.isolated:
        env["HOME"] = env["TMPDIR"] = SCRATCH
    else:  # a sandbox's pid namespace ends with its host instead
        env[SUPERVISOR_PID_ENV] = str(os.getpid())
    tf_config = plan.tf_config(task=task)
    if tf_config:
        env["TF_CONFIG"] = tf_config
    return env


def _launch(*, spec: TrialSpec, plan: ClusterPlan, task: TaskAddress, attempt: Path,
            runtime: Runtime, python: TaskPython, network: str, network_alias: str) -> _Task:
    stem = f"{task.type}-{task.index}"
    events_path, log_path = attempt / f"{stem}.events.jsonl", attempt / f"{stem}.log"
    host_log_path = attempt / f"{stem}.host.log"
    gpus = gpu_ids_for(resources=spec.resources, task=task)
    slots = slots_for(resources=spec.resources, task=task)
    confinement = (task_confinement(spec=spec, python=python, plan=plan, gpus=gpus,
                                    abi=runtime.landlock_abi)
                   if runtime.isolated else None)
    env = _environment(spec=spec, plan=plan, task=task, runtime=runtime, python=python,
                       gpus=gpus)
    exposure = trial_exposure(spec=spec)
    write, read = exposure.write, exposure.read
    relay = None
    if spec.workspace.get("api_url") and runtime.isolated and network == NETWORK_OWN:
        # The session's own network has no way out: `tfp` reaches the API through this socket
        # (a container's user is not the node's, as a sandbox's is: the socket is made its).
        socket_path = attempt / f"{stem}.api.sock"
        relay = ApiRelay(path=socket_path, url=spec.workspace["api_url"],
                         owner=SANDBOX_UID if runtime.in_containers else None)
        env[API_SOCKET_ENV] = str(socket_path)
        read += (str(socket_path),)
    order = {
        "spec": spec.to_json(), "cluster": plan.to_json(), "task_type": task.type,
        "task_index": task.index, "cwd": spec.work_dir, "env": env,
        "confine": confinement.as_dict() if confinement else None,
    }
    pool = warm_pool()
    # A warm host has a network of its own and nothing bound for a session; a warm container
    # no GPUs and one slot's size: it can only be a one-slot GPU-less first task.
    # A registered dataset's folders are bound by descriptor as a cold host starts; a warm host
    # shows the dataset roots by name and narrows them by name, following links.
    warm_fits = network == NETWORK_OWN and relay is None and not exposure.pinned and (
        not runtime.in_containers or (not gpus and slots == 1))
    host = (pool.take(python=python, write=write, read=read)
            if pool is not None and pool.runtime == runtime and warm_fits else None)
    warm = host is not None
    if host is None or not host.hand(order=order, events=events_path, log=log_path):
        warm = False
        start = functools.partial(
            host_start, runtime=runtime, python=python, env=task_base_environment(python=python),
            exposure=replace(exposure, read=read), log=host_log_path, cwd=attempt,
            network=network, network_alias=network_alias, gpus=gpus, slots=slots,
            labels={LABEL_TRIAL: spec.trial_id, LABEL_TASK: task.name})
        # Forked from the node's fork server where it has one; a cold host if that failed.
        host = start()
        if not host.hand(order=order, events=events_path, log=log_path) and host.forked:
            host.kill()
            host.wait()
            host = start(forked=False)
            host.hand(order=order, events=events_path, log=log_path)
    return _Task(task, host, EventTail(path=str(events_path), task=task.name,
                                       trial_id=spec.trial_id),
                 LineTail(path=str(log_path), max_line=OUTPUT_LINE_CHARS), log_path, host_log_path,
                 warm, relay)


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


class _Gang:
    def __init__(self, *, tasks: list[_Task], on_events: Callable[[list[TrialEvent]], None],
                 builder: OutcomeBuilder, trial_id: str) -> None:
        self.tasks, self.on_events, self.builder = tasks, on_events, builder
        self.trial_id = trial_id
        self.output_lines = 0

    def _event(self, kind: str, **payload: object) -> TrialEvent:
        return TrialEvent(kind=kind, payload=dict(payload), task="supervisor",
                          trial_id=self.trial_id)

    def notice(self, kind: str, **payload: object) -> None:
        self.on_events([self._event(kind, **payload)])

    def pump(self) -> None:
        """Forwards new events, then records exits (in that order, so no last words are lost).

        Everything one pump found goes out as one batch: the recorder writes it in one
        transaction (an epoch's metrics and checkpoint arrive together), and every commit costs
        the node cores that the trial trains on.
        """
        found: list[TrialEvent] = []
        for task in self.tasks:
            found += self._read(task)
        for task in self.tasks:
            if task.exit_code is None and task.host.poll() is not None:
                task.exit_code, task.exited_at = task.host.returncode, time.monotonic()
                found += self._read(task)
                found.append(self._event(
                    "log", message=f"{task.address.name} exited with code {task.exit_code}",
                    exit_code=task.exit_code, task=task.address.name,
                ))
        if found:
            self.on_events(found)

    def _read(self, task: _Task) -> list[TrialEvent]:
        events = task.events.read_new()
        for event in events:
            self.builder.feed(event)
        return events + self._output(task)

    def _output(self, task: _Task) -> list[TrialEvent]:
        """What the task printed, as log lines of its own, until the attempt's budget is spent."""
        lines = [line for line in task.output.read_lines() if line.strip()]
        if self.output_lines >= OUTPUT_LINES_MAX or not lines:
            return []
        kept = lines[: OUTPUT_LINES_MAX - self.output_lines]
        self.output_lines += len(kept)
        events = [
            TrialEvent(kind="log", task=task.address.name, trial_id=self.trial_id,
                       payload={"message": line.decode("utf-8", "replace").rstrip("\r"),
                                "stream": "output"})
            for line in kept
        ]
        if self.output_lines >= OUTPUT_LINES_MAX:
            events.append(self._event(
                "log", message=f"Output beyond {OUTPUT_LINES_MAX} lines is not shown here; each "
                "task's full log is kept with the attempt."))
        return events

    def running(self) -> list[_Task]:
        return [t for t in self.tasks if t.exit_code is None]

    def stop(self, *, grace_seconds: float) -> tuple[float, list[str]]:
        """SIGTERM everyone still running, SIGKILL what remains after the grace period."""
        start = time.monotonic()
        for task in self.running():
            task.host.terminate()
        deadline = start + grace_seconds
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
            self.pump()
        killed = [t.address.name for t in self.running()]
        for task in self.running():
            task.host.kill()
        for task in self.tasks:
            task.host.wait()
            if task.relay is not None:
                task.relay.close()
        self.pump()
        return time.monotonic() - start, killed

    def exit_codes(self) -> dict[str, int | None]:
        return {t.address.name: t.exit_code for t in self.tasks}


def _failure_reason(*, gang: _Gang, culprit: _Task) -> tuple[bool, str]:
    # A full disk, then a user error, anywhere explains the rest (peers then fail on the broken
    # collective).
    for code in (EXIT_NO_SPACE, EXIT_USER_ERROR):
        found = [task for task in gang.tasks if task.exit_code == code]
        if found:
            culprit = found[0]
            break
    code = culprit.exit_code if culprit.exit_code is not None else -1
    retryable, what = exit_describe(code=code)
    error = gang.builder.errors.get(culprit.address.name)
    detail = (error.get("traceback") or error.get("message", "")) if error else ""
    if error and error.get("message") and error["message"] not in detail:
        detail = f"{error['message']}\n{detail}"
    detail = detail or _log_tail(culprit.log_path) or _log_tail(culprit.host_log_path)
    reason = f"{culprit.address.name} {what} (exit code {code})"
    return retryable, f"{reason}:\n{detail}" if detail else reason


def trial_supervise(
    *, spec: TrialSpec, on_events: Callable[[list[TrialEvent]], None],
    should_cancel: Callable[[], bool],
    grace_seconds: float = 30.0, cluster: ClusterPlan | None = None,
    local_host: str = LOCALHOST, poll_seconds: float = 0.2, cancel_check_seconds: float = 1.0,
    runtime: Runtime | None = None, python: TaskPython | None = None, run_dir: str = "",
) -> TrialOutcome:
    try:  # the cheap, TF-free checks: a broken module fails before any process starts
        catalog.model_validate(model=spec.model)
        catalog.resources_validate(resources=spec.resources)
        catalog.hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
        trial_paths(spec=spec)  # a registered dataset's folders: nothing starts if one is refused
    except InvalidInput as error:
        return TrialOutcome(status="failed", retryable=False, exit_reason=f"invalid trial: {error}")
    pool = warm_pool()
    runtime = runtime or (pool.runtime if pool else runtime_for(name=DEFAULT_RUNTIME))
    python = python or TaskPython()
    plan = cluster or cluster_plan(resources=spec.resources, host=local_host)
    try:
        Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
        attempt = attempt_dir_new(run_dir=run_dir or run_dir_default(work_dir=spec.work_dir))
        # The spec of a workspace's session holds its API and Jupyter tokens.
        private_write_text(path=attempt / "spec.json", text=spec.to_json())
        private_write_text(path=attempt / "cluster.json", text=plan.to_json())
    except OSError as error:
        if not no_space(error):
            raise
        return TrialOutcome(status="failed", retryable=True,
                            exit_reason=f"The attempt could not start: {NO_SPACE_HINT} ({error})")
    builder = OutcomeBuilder(chief=plan.chief.name)
    local = plan.local(host=local_host)
    gang = _Gang(tasks=[], on_events=on_events, builder=builder, trial_id=spec.trial_id)
    gang_network: GangNetwork | None = None
    try:
        gang.notice("status", phase="launching", attempt=attempt.name, runtime=runtime.name,
                    isolated=runtime.isolated,
                    tasks=[{"task": t.name, "address": t.address} for t in local])
        gang_network = _gang_network(spec=spec, plan=plan, local_host=local_host,
                                     runtime=runtime, attempt=attempt)
        for address in local:
            network = (_gang_network_ref(network=gang_network, runtime=runtime)
                       if gang_network is not None else
                       _network(spec=spec, plan=plan, tasks=gang.tasks, runtime=runtime))
            gang.tasks.append(_launch(spec=spec, plan=plan, task=address, attempt=attempt,
                                      runtime=runtime, python=python, network=network,
                                      network_alias=local_host))
        gang.notice("status", phase="launched", tasks=[
            {"task": t.address.name, "host": t.host.pid, "warm": t.warm, "forked": t.host.forked}
            for t in gang.tasks
        ])
        return _watch(gang=gang, plan=plan, should_cancel=_asked_at_most_every(
                          seconds=cancel_check_seconds, check=should_cancel),
                      grace_seconds=grace_seconds, poll_seconds=poll_seconds, attempt=attempt)
    except InvalidInput as error:  # this node cannot isolate the trial as asked, or a dataset's
        # folder became a link since the check above
        gang.stop(grace_seconds=grace_seconds)
        return builder.build(status="failed", retryable=False,
                             exit_reason=f"The attempt could not start: {error}",
                             exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
    except OSError as error:  # a launch's files (order, logs) on a disk that filled up
        if not no_space(error):
            raise
        gang.stop(grace_seconds=grace_seconds)
        return builder.build(status="failed", retryable=True,
                             exit_reason=f"The attempt could not start: {NO_SPACE_HINT} ({error})",
                             exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
    finally:
        if gang.running():  # on_events or should_cancel raised: never leave orphans behind
            gang.stop(grace_seconds=grace_seconds)
        if gang_network is not None:
            gang_network_remove(network=gang_network)


def _gang_network(*, spec: TrialSpec, plan: ClusterPlan, local_host: str, runtime: Runtime,
                  attempt: Path) -> GangNetwork | None:
    """A sandboxed gang across nodes, on a node run as root: a network namespace of its own on
    this node that reaches only its peers' ports and only they reach (gang_network.py).

    Under podman (which joins a namespace by path; docker cannot) too, where the gang's nodes
    do not share one engine (PLATFORM_CONTAINER_GANG_NETWORK=host): the node must then be on
    its engine's machine, as a node run as root with a local engine is.

    None elsewhere: a node not run as root (or configured without PLATFORM_GANG_SUBNET) shares
    its network, narrowed by Landlock (_host_network); so do nodes addressed by loopback (one
    machine: a namespace's own loopback would hide the other nodes' addresses)."""
    hosts = {t.host for t in plan.tasks}
    local = plan.local(host=local_host)
    containers_can = runtime.containers is None or (
        runtime.name == "podman" and runtime.containers.gang_network == NETWORK_HOST)
    if (len(hosts) == 1 or not local or not runtime.isolated or not containers_can
            or not runtime.gang_subnet or not node_privileged()):
        return None
    addresses = {host: node_ipv4(host=host) for host in hosts}
    if any(ipaddress.IPv4Address(ip).is_loopback for ip in addresses.values()):
        return None
    return gang_network_create(
        key=f"{spec.trial_id}/{attempt}", local_ip=addresses[local_host],
        local_ports=tuple(t.port for t in local),
        peers=tuple((addresses[t.host], t.port) for t in plan.tasks if t.host != local_host),
        subnet=runtime.gang_subnet)


def _gang_network_ref(*, network: GangNetwork, runtime: Runtime) -> str:
    """How a task host joins the gang's namespace: nsenter for a sandbox, podman by path."""
    return (f"{NETNS_PATH_PREFIX}{network.path}" if runtime.in_containers else
            netns_ref(net=network.path))


def _network(*, spec: TrialSpec, plan: ClusterPlan, tasks: list[_Task], runtime: Runtime) -> str:
    """A container's network: none of its own for the first task of a single-node trial, that
    one's loopback for the others. Across nodes, the first task of each node joins the gang's
    own network where every node shares one engine, else the host's (narrowed to the gang's
    ports); the node's other tasks join the first one's. A workspace's `tfp` must reach the
    platform's API: a container joins the node's workspace network (the host's, narrowed by
    Landlock to the API's port, or one where the web app is all there is to reach); a sandbox
    has a network of its own and the node's relay socket (api_relay.py).

    A sandbox's task: a network of its own (the node's later tasks of the gang join it), or,
    for a gang across nodes without a network of its own (_gang_network), the host's narrowed
    by Landlock to the gang's ports."""
    if tasks:
        return tasks[0].host.network_ref
    if spec.workspace.get("api_url") and runtime.containers is not None:
        if runtime.containers.workspace_network == WORKSPACE_RELAY:
            return NETWORK_OWN  # `tfp` goes through the node's relay socket
        if runtime.containers.workspace_network == NETWORK_HOST:
            return _host_network(runtime=runtime, why="a workspace's container")
        return runtime.containers.workspace_network
    if spec.workspace.get("api_url") and not runtime.isolated:
        return NETWORK_HOST
    one_node = len({t.host for t in plan.tasks}) == 1
    if one_node:
        # A node not run as root joins through the first sandbox's user namespace, which must
        # be started for it (sandbox_command); as root, any sandbox's namespace can be joined.
        joined = len(plan.tasks) > 1 and runtime.isolated and runtime.containers is None
        return NETWORK_GANG if joined and not node_privileged() else NETWORK_OWN
    if runtime.containers is not None and runtime.containers.gang_network == "gang":

        return gang_network_name(trial_id=spec.trial_id, plan=plan)
    return _host_network(runtime=runtime, why="a gang across nodes")


def _host_network(*, runtime: Runtime, why: str) -> str:
    """The node's network, for what cannot have one of its own; only where Landlock can keep
    it to the gang's ports (the process runtime is not isolated anyway)."""
    if runtime.isolated and runtime.landlock_abi < TCP_PORTS_ABI:
        raise InvalidInput(
            f"{why.capitalize()} shares the node's network, which only Landlock (ABI "
            f"{TCP_PORTS_ABI}+, Linux 6.7+) can narrow to its own ports; this node confines "
            f"with ABI {runtime.landlock_abi}."
        )
    return NETWORK_HOST


def _asked_at_most_every(*, seconds: float, check: Callable[[], bool]) -> Callable[[], bool]:
    """`check` answered at most once per `seconds`; False in between.

    Asking is a database query in the worker, which shares the cores with training; events and
    exits are still watched every poll.
    """
    last = [float("-inf")]

    def ask() -> bool:
        now = time.monotonic()
        if now - last[0] < seconds:
            return False
        last[0] = now
        return check()

    return ask


def _watch(*, gang: _Gang, plan: ClusterPlan, should_cancel: Callable[[], bool],
           grace_seconds: float, poll_seconds: float, attempt: Path) -> TrialOutcome:
    essential = {t.name for t in plan.essential}
    while True:
        gang.pump()
        failed = sorted(
            (t for t in gang.tasks if t.exit_code is not None
             and (t.exit_code != EXIT_OK or t.address.name not in essential)),
            key=lambda t: t.exited_at,
        )
        if failed:
            gang.notice("status", phase="stopping", reason=f"{failed[0].address.name} exited")
            gang.stop(grace_seconds=grace_seconds)
            retryable, reason = _failure_reason(gang=gang, culprit=failed[0])
            return gang.builder.build(status="failed", retryable=retryable, exit_reason=reason,
                                      exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
        # A node without essential tasks (say, only parameter servers) is done when they all are.
        watched = [t for t in gang.tasks if t.address.name in essential] or gang.tasks
        if all(t.exit_code == EXIT_OK for t in watched):
            gang.stop(grace_seconds=grace_seconds)  # parameter servers and their workers
            return gang.builder.build(status="completed", retryable=False, exit_reason="completed",
                                      exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
        if should_cancel():
            gang.notice("status", phase="canceling")
            seconds, killed = gang.stop(grace_seconds=grace_seconds)
            how = (f"{', '.join(killed)} killed after the {grace_seconds:g}s grace period"
                   if killed else "all stopped cleanly")
            return gang.builder.build(
                status="canceled", retryable=False,
                exit_reason=f"canceled: {len(gang.tasks)} processes ended in {seconds:.1f}s, {how}",
                exit_codes=gang.exit_codes(), attempt_dir=str(attempt),
            )
        time.sleep(poll_seconds)
