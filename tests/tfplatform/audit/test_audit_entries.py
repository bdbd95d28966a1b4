"""The log itself: one row per record, in the caller's transaction, never rewritten; the
request's client address; the actor's name kept after the account is gone."""

from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import NodeFactory, UserFactory
from tfplatform.audit.models import AuditAction, AuditEntry, AuditLogIsAppendOnly
from tfplatform.audit.services import audit_record
from tfplatform.cluster.models import Node
from tfplatform.cluster.services import node_set_state

pytestmark = pytest.mark.django_db


def test_a_record_is_one_row_with_who_what_and_before_after() -> None:
    staff, node = UserFactory(username="root", is_staff=True), NodeFactory(hostname="box")
    entry = audit_record(actor=staff, action=AuditAction.NODE_CORDON, target=node,
                         before={"state": "ready"}, after={"state": "cordoned"})
    assert AuditEntry.objects.count() == 1
    assert (entry.actor, entry.actor_username, entry.action) == (staff, "root", "node.cordon")
    assert (entry.object_type, entry.object_id, entry.object_repr) == (
        "cluster.node", str(node.pk), "box")
    assert (entry.before, entry.after) == ({"state": "ready"}, {"state": "cordoned"})
    assert entry.client_address is None  # no request: the platform itself, or a shell


def test_a_rolled_back_transaction_leaves_no_row() -> None:
    node = NodeFactory()
    with pytest.raises(RuntimeError), transaction.atomic():
        node_set_state(node=node, state=Node.State.CORDONED, actor=UserFactory(is_staff=True))
        assert AuditEntry.objects.count() == 1
        raise RuntimeError("the caller's transaction fails after the change")
    assert AuditEntry.objects.count() == 0
    assert Node.objects.get(pk=node.pk).state == Node.State.READY


def test_rows_are_never_changed_or_deleted_through_the_orm() -> None:
    entry = audit_record(actor=None, action=AuditAction.NODE_STATE_CHANGE, target=NodeFactory(),
                         before={"state": "ready"}, after={"state": "lost"})
    entry.action = "node.enable"
    for attempt in (entry.save, entry.delete, AuditEntry.objects.all().delete,
                    lambda: AuditEntry.objects.update(action="node.enable")):
        with pytest.raises(AuditLogIsAppendOnly):
            attempt()
    assert AuditEntry.objects.get().action == "node.state_change"


def test_an_unknown_action_or_a_deleted_target_is_a_programming_error() -> None:
    node = NodeFactory()
    with pytest.raises(ValueError, match="Unknown audit action"):
        audit_record(actor=None, action="node.explode", target=node, before=None, after=None)
    node.delete()
    with pytest.raises(ValueError, match="before deleting"):
        audit_record(actor=None, action=AuditAction.NODE_DELETE, target=node, before=None,
                     after=None)


def test_values_are_kept_as_json_without_nul() -> None:
    entry = audit_record(actor=None, action=AuditAction.NODE_CHANGE, target=NodeFactory(),
                         before={"labels": {"zone": "a\x00b"}, "seen": {3, 1}},
                         after={"at": NodeFactory().registered_at})
    entry.refresh_from_db()
    assert entry.before == {"labels": {"zone": "ab"}, "seen": [1, 3]}
    assert isinstance(entry.after["at"], str)


def test_the_actors_name_outlives_their_account() -> None:
    gone = UserFactory(username="former-admin", is_staff=True)
    audit_record(actor=gone, action=AuditAction.NODE_DRAIN, target=NodeFactory(),
                 before={"state": "ready"}, after={"state": "draining"})
    gone.delete()
    entry = AuditEntry.objects.get()
    assert entry.actor is None and entry.actor_username == "former-admin"


def test_the_requests_client_address_is_recorded_as_the_throttles_see_it(settings: Any) -> None:
    node = NodeFactory()
    client = APIClient(REMOTE_ADDR="203.0.113.7")
    client.force_authenticate(UserFactory(is_staff=True))
    # A header the client writes itself is not taken without a proxy of ours in front.
    assert client.post(f"/api/v1/nodes/{node.pk}/cordon/",
                       HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 200
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    assert client.post(f"/api/v1/nodes/{node.pk}/drain/",
                       HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 200
    # Not an address at all (what a proxy passed on): no address rather than a failed action.
    assert client.post(f"/api/v1/nodes/{node.pk}/enable/",
                       HTTP_X_FORWARDED_FOR="not-an-ip").status_code == 200
    recorded = dict(AuditEntry.objects.values_list("action", "client_address"))
    assert recorded == {"node.cordon": "203.0.113.7", "node.drain": "198.51.100.1",
                        "node.enable": None}


def test_a_page_request_records_its_address_too() -> None:
    node = NodeFactory()
    client = Client(REMOTE_ADDR="2001:db8::5")
    client.force_login(UserFactory(is_staff=True))
    client.post(f"/cluster/nodes/{node.pk}/state/", {"action": "cordon"})
    assert AuditEntry.objects.get().client_address == "2001:db8::5"
