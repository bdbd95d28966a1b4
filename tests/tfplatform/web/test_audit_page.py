"""The staff audit log page: rows with who, what, which object and before → after; the API's
filters; a page at a time; nobody else sees it."""

import pytest
from django.test import Client

from tests.factories import NodeFactory, UserFactory
from tfplatform.accounts.models import User
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import audit_record
from tfplatform.web.audit_views import PAGE_SIZE

pytestmark = pytest.mark.django_db


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_staff_see_who_did_what_before_and_after() -> None:
    root = UserFactory(username="root", is_staff=True)
    node = NodeFactory(hostname="gpu-box")
    entry = audit_record(actor=root, action=AuditAction.NODE_CORDON, target=node,
                         before={"state": "ready"}, after={"state": "cordoned"})
    audit_record(actor=None, action=AuditAction.NODE_STATE_CHANGE, target=NodeFactory(),
                 before={"state": "ready"}, after={"state": "lost"})
    html = browser(root).get("/cluster/audit/").content.decode()
    row = html[html.index(f'id="entry-{entry.pk}"'):]
    row = row[: row.index("</tr>")]
    assert '<a href="?actor=root">root</a>' in row and "<code>node.cordon</code>" in row
    assert "gpu-box" in row and f"cluster.node #{node.pk}" in row
    assert "<strong>state</strong>: <code>ready</code> → <code>cordoned</code>" in row
    assert '<span class="empty">platform</span>' in html  # the row without an actor
    assert 'href="/cluster/audit/">Audit log</a>' in html  # in the staff navigation

    only = browser(root).get("/cluster/audit/", {"actor": "root", "action": "node.cordon",
                                                 "since": "", "object_type": ""})
    assert only.content.decode().count('id="entry-') == 1


def test_others_do_not_learn_it_exists_and_bad_filters_are_shown() -> None:
    assert browser(UserFactory()).get("/cluster/audit/").status_code == 404
    assert Client().get("/cluster/audit/").status_code == 302  # to the sign-in page
    refused = browser(UserFactory(is_staff=True)).get("/cluster/audit/",
                                                      {"since": "last tuesday"})
    assert refused.status_code == 400
    assert 'id="filter-errors"' in refused.content.decode()


def test_the_log_is_read_a_page_at_a_time() -> None:
    root = UserFactory(is_staff=True)
    node = NodeFactory()
    for _ in range(PAGE_SIZE + 1):
        audit_record(actor=root, action=AuditAction.NODE_DRAIN, target=node,
                     before={"state": "ready"}, after={"state": "draining"})
    first = browser(root).get("/cluster/audit/", {"action": "node.drain"}).content.decode()
    assert first.count('id="entry-') == PAGE_SIZE
    assert "?action=node.drain&amp;page=2" in first
    second = browser(root).get("/cluster/audit/", {"action": "node.drain", "page": "2"})
    assert second.content.decode().count('id="entry-') == 1
    # Any page number a person types lands on a page.
    assert browser(root).get("/cluster/audit/", {"page": "-1x"}).status_code == 200
