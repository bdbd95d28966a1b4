"""`tfp audit` against a live server: staff read the log as a table or the API's JSON, with its
filters; anyone else gets the API's refusal and exit code 1."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.factories import NodeFactory, UserFactory
from tests.tfplatform_cli.conftest import Tfp
from tests.tfplatform_cli.test_usage_cli import logged_in
from tfplatform.cluster.models import Node
from tfplatform.cluster.services import node_set_state

pytestmark = pytest.mark.django_db(transaction=True)


def test_staff_read_the_audit_log_and_others_are_refused(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    root = UserFactory(username="root", is_staff=True)
    UserFactory(username="carol")
    node = NodeFactory(hostname="gpu-box")
    node_set_state(node=node, state=Node.State.CORDONED, actor=root)
    staff = logged_in(tfp, live_server.url, "root")  # its token's issue is a row too

    shown = staff("audit", "--action", "node.cordon")
    assert shown.returncode == 0, shown.stderr
    header, row, *_ = shown.stdout.splitlines()
    assert header.split() == ["TIME", "ACTOR", "ACTION", "OBJECT", "BEFORE", "→", "AFTER",
                              "CLIENT"]
    assert "root" in row and "node.cordon" in row and f"cluster.node:{node.pk} gpu-box" in row
    assert "state: ready → cordoned" in row
    assert "1-1 of 1, newest first" in shown.stdout

    listed = json.loads(staff("audit", "--actor", "root", "--json").stdout)
    assert sorted(e["action"] for e in listed["results"]) == ["node.cordon", "token.issue"]
    issued = next(e for e in listed["results"] if e["action"] == "token.issue")
    assert issued["client_address"] == "127.0.0.1"  # the CLI's sign-in, from this machine

    bad = staff("audit", "--since", "last tuesday")
    assert bad.returncode == 1 and "since" in bad.stderr

    refused = logged_in(tfp, live_server.url, "carol")("audit")
    assert refused.returncode == 1
    assert "permission" in refused.stderr.lower()
