"""`tfp lineage` and `tfp reproduce` against a live server, on an experiment trained through the
services a node uses (the training itself left out)."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.tfplatform.experiments.services.test_lineage import node, submitted, trained  # noqa: F401
from tests.tfplatform_cli.conftest import Tfp
from tests.tfplatform_cli.test_search_cli import signed_in
from tfplatform.accounts.models import User
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db(transaction=True)


def test_lineage_shows_the_chain_and_reproduce_prints_the_new_id_or_the_reason(
    live_server: Any, tfp: Callable[[str], Tfp], node: Node,  # noqa: F811
) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    experiment = submitted(User.objects.get(username="alice"))
    lineage = trained(experiment, node=node)

    shown = alice("lineage", str(experiment.pk))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"experiment  #{experiment.pk} lineage (alice)"
    assert lines[1] == f"trial       attempt 0 (completed), TensorFlow 2.21.0, on {node.hostname}"
    assert lines[2] == "dataset     digits"
    assert f"module      mlp, sha256 {lineage.module_sha256[:12]}" in lines
    assert lines[-1] == "seed        7"
    as_json = json.loads(alice("lineage", str(experiment.pk), "--json").stdout)
    assert as_json["trial_id"] == lineage.trial_id and as_json["seed"] == 7

    done = alice("reproduce", str(experiment.pk))
    assert done.returncode == 0, done.stderr
    again = Experiment.objects.get(reproduced_from=experiment)
    assert done.stdout == f"{again.pk}\n"
    assert "pinned: hyperparameters as the original's (seed 7)" in done.stderr
    assert "note: TensorFlow is the nodes' own" in done.stderr

    never = submitted(User.objects.get(username="alice"))
    Experiment.objects.filter(pk=never.pk).update(state="failed")
    refused = alice("reproduce", str(never.pk))
    assert refused.returncode == 1 and "can no longer be reproduced as it ran" in refused.stderr
    anyway = alice("reproduce", str(never.pk), "--allow-changes")
    assert anyway.returncode == 0 and "differs: no trial of" in anyway.stderr

    bob = signed_in(tfp, live_server.url, "bob")
    for command in ("lineage", "reproduce"):
        hidden = bob(command, str(experiment.pk))
        assert hidden.returncode == 1
        assert f"experiment {experiment.pk} not found" in hidden.stderr
    assert Experiment.objects.count() == 4
