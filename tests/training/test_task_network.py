"""Where a task's network comes from: a namespace of its own (its gang's, on one node), or the
node's, narrowed by Landlock; where Landlock cannot narrow it, the trial is refused at launch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import trial_run
from training.cluster import ClusterPlan, TaskAddress
from training.runtime import runtime_for
from training.spec import Resources
from training.supervisor import trial_supervise

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


def test_a_gang_across_nodes_without_landlock_is_refused_at_launch(
    tmp_path: Path, make_spec: Any
) -> None:
    """Its tasks must reach another node, so they would share the node's network, which only
    Landlock's TCP rules keep to the gang's own ports."""
    spec = make_spec(work_dir=tmp_path / "work", model="mlp",
                     resources=Resources(workers=2))
    plan = ClusterPlan((TaskAddress("worker", 0, "127.0.0.1", 40001),
                        TaskAddress("worker", 1, "127.0.0.2", 40002)))
    events: list[Any] = []
    for abi in (0, 3):  # none (Ubuntu 22.04), or files only
        runtime = replace(runtime_for(name="sandbox"), landlock_abi=abi)
        outcome = trial_supervise(spec=spec, on_events=events.extend,
                                  should_cancel=lambda: False, cluster=plan,
                                  local_host="127.0.0.1", runtime=runtime,
                                  run_dir=str(tmp_path / f"runs-{abi}"))
        assert (outcome.status, outcome.retryable) == ("failed", False), outcome
        assert "only Landlock (ABI 4+" in outcome.exit_reason, outcome.exit_reason
        assert "a gang across nodes" in outcome.exit_reason.lower()
    assert json.dumps([e.payload for e in events]).count('"phase": "launched"') == 0
