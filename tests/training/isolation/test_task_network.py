"""Where a task's network comes from: a namespace of its own (its gang's, on one node, or across
nodes on a node run as root: test_gang_network.py), or the node's, narrowed by Landlock; where
Landlock cannot narrow it, the trial is refused at launch."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import DIGITS_HPARAMS, trial_run
from training.isolation.runtime import repo_root
from training.isolation.runtime_factory import runtime_for
from training.spec import Resources
from training.supervisor.supervise import trial_supervise
from training.tf_config import ClusterPlan, TaskAddress

# Host-wide network namespaces (tfp-*), nftables and fixed ports: one worker runs these, in turn.
pytestmark = pytest.mark.xdist_group("netns")

# Each task writes its network namespace's identity where the test can read it.
NETNS_MODULE = """
import os, tf_keras as keras

with open(f"netns-{os.environ['PLATFORM_TASK'].replace(':', '-')}", "w") as handle:
    handle.write(str(os.stat("/proc/self/ns/net").st_ino))


def build_model(hparams):
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""


@pytest.mark.slow
def test_a_gangs_tasks_on_one_node_share_a_network_that_is_not_the_nodes(
    tmp_path: Path, make_spec: Any
) -> None:
    module = tmp_path / "netns_module.py"
    module.write_text(NETNS_MODULE)
    work = tmp_path / "work"
    spec = make_spec(work_dir=work, model=str(module), resources=Resources(workers=2),
                     hyperparameters={"epochs": 1})
    run = trial_run(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    seen = {(work / f"netns-worker-{i}").read_text() for i in range(2)}
    assert len(seen) == 1, seen  # one namespace for the gang
    assert seen != {str(Path("/proc/self/ns/net").stat().st_ino)}  # and not the node's


# A node run as an ordinary user: the supervisor for a two-worker gang, printing its outcome.
UNPRIVILEGED_NODE = """
import json, sys
from training.isolation.runtime_factory import runtime_for
from training.spec import Resources, TrialSpec
from training.supervisor.supervise import trial_supervise

root, module, hparams = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = TrialSpec(trial_id="unprivileged", model=module, dataset="digits",
                 work_dir=f"{root}/work", hyperparameters=hparams,
                 resources=Resources(workers=2))
outcome = trial_supervise(spec=spec, on_events=lambda events: None,
                          should_cancel=lambda: False, runtime=runtime_for(name="sandbox"),
                          run_dir=f"{root}/runs")
print(json.dumps({"status": outcome.status, "reason": outcome.exit_reason}))
"""
NOBODY = 65534


@pytest.fixture
def nobodys_folder() -> Iterator[Path]:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs the suite as root: this test becomes an ordinary user")
        pytest.skip("becoming another user takes root")
    folder = Path(tempfile.mkdtemp(prefix="tfp-unprivileged-"))
    folder.chmod(0o755)
    os.chown(folder, NOBODY, NOBODY)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# Who an unprivileged node is: an ordinary user, or root in a container without the admin
# capabilities (as compose's workers are).
UNPRIVILEGED = {
    "nobody": "setpriv --reuid=65534 --regid=65534 --clear-groups",
    "root-without-admin-caps": "setpriv --inh-caps=-sys_admin,-net_admin "
                               "--bounding-set=-sys_admin,-net_admin",
}


def _unprivileged(*, argv: list[str], view: Path, who: str) -> list[str]:
    """argv run as `who` in a mount namespace of its own where the interpreter and the
    repository are reachable even if they live in a folder only root may enter (/root)."""
    shown = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), repo_root()]
    hidden: dict[Path, list[Path]] = {}
    for path in shown:
        closed = next((a for a in reversed(path.parents) if not a.stat().st_mode & 0o001), None)
        if closed is not None:
            hidden.setdefault(closed, []).append(path)
    steps = []
    kept = [(path, view / str(i)) for i, path in enumerate(p for ps in hidden.values() for p in ps)]
    for path, copy in kept:
        steps += [f"mkdir -p {copy}", f"mount --bind {path} {copy}"]
    steps += [f"mount -t tmpfs -o mode=755 tmpfs {closed}" for closed in hidden]
    for path, copy in kept:
        steps += [f"mkdir -p {path}", f"mount --bind {copy} {path}"]
    steps.append(f"exec {UNPRIVILEGED[who]} " + shlex.join(argv))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", "; ".join(steps)]


@pytest.mark.slow
@pytest.mark.parametrize("who", list(UNPRIVILEGED))
def test_a_gang_on_a_node_not_run_as_root_shares_a_namespace_of_its_own(
    nobodys_folder: Path, who: str,
) -> None:
    """The node cannot join a namespace as root would; it joins through the user namespace
    that owns the first sandbox's network, which that sandbox leaves open to it."""
    module = nobodys_folder / "netns_module.py"
    module.write_text(NETNS_MODULE)
    hparams = {**DIGITS_HPARAMS, "epochs": 1}
    node = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={nobodys_folder}",
            f"PYTHONPATH={repo_root() / 'platform'}:{repo_root()}", sys.executable, "-c",
            UNPRIVILEGED_NODE, str(nobodys_folder), str(module), json.dumps(hparams)]
    argv = _unprivileged(who=who, argv=node, view=nobodys_folder / ".view")
    result = subprocess.run(argv, cwd=nobodys_folder, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"status": "completed", "reason": "completed"}, outcome
    work = nobodys_folder / "work"
    assert work.stat().st_uid == (NOBODY if who == "nobody" else 0)  # the node really was
    seen = {(work / f"netns-worker-{i}").read_text() for i in range(2)}
    assert len(seen) == 1, seen  # one namespace for the gang
    assert seen != {str(Path("/proc/self/ns/net").stat().st_ino)}  # and not the node's


def test_a_gang_across_nodes_without_landlock_is_refused_at_launch(
    tmp_path: Path, make_spec: Any
) -> None:
    """On a node that gives gangs no network of their own (not run as root, or without
    PLATFORM_GANG_SUBNET), its tasks would share the node's network to reach another node, which
    only Landlock's TCP rules keep to the gang's own ports."""
    spec = make_spec(work_dir=tmp_path / "work", model="mlp",
                     resources=Resources(workers=2))
    plan = ClusterPlan((TaskAddress("worker", 0, "127.0.0.1", 40001),
                        TaskAddress("worker", 1, "127.0.0.2", 40002)))
    events: list[Any] = []
    for abi in (0, 3):  # none (Ubuntu 22.04), or files only
        runtime = replace(runtime_for(name="sandbox"), landlock_abi=abi, gang_subnet="")
        outcome = trial_supervise(spec=spec, on_events=events.extend,
                                  should_cancel=lambda: False, cluster=plan,
                                  local_host="127.0.0.1", runtime=runtime,
                                  run_dir=str(tmp_path / f"runs-{abi}"))
        assert (outcome.status, outcome.retryable) == ("failed", False), outcome
        assert "only Landlock (ABI 4+" in outcome.exit_reason, outcome.exit_reason
        assert "a gang across nodes" in outcome.exit_reason.lower()
    assert json.dumps([e.payload for e in events]).count('"phase": "launched"') == 0
