"""The access table the model server's front gets: live tokens of active users only, each
model's visibility and routes, the inference rate."""

from datetime import timedelta

import pytest
from django.utils import timezone

from serving.front import token_digest
from tests.factories import (
    ModelLabelFactory,
    ModelVersionFactory,
    RegisteredModelFactory,
    TeamFactory,
    UserFactory,
)
from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.modelregistry.selectors.access import serving_access_table

pytestmark = pytest.mark.django_db


def test_the_table_holds_what_the_front_decides_with(settings: object) -> None:
    team = TeamFactory()
    alice, staff = UserFactory(team=team), UserFactory(is_staff=True)
    gone = UserFactory(is_active=False)
    _, alice_key = api_token_issue(user=alice, name="a")
    expired, expired_key = api_token_issue(user=alice, name="old")
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(1))
    _, staff_key = api_token_issue(user=staff, name="s")
    _, gone_key = api_token_issue(user=gone, name="g")
    model = RegisteredModelFactory(name="m", owner=alice, team=team, canary_percent=20)
    stable = ModelLabelFactory(version=ModelVersionFactory(model=model, version=1))
    ModelLabelFactory(version=ModelVersionFactory(model=model, version=2), label="canary")
    RegisteredModelFactory(name="open", owner=staff, public=True)

    table = serving_access_table()
    assert set(table.callers) == {token_digest(alice_key), token_digest(staff_key)}
    assert token_digest(expired_key) not in table.callers
    assert token_digest(gone_key) not in table.callers
    found = table.callers[token_digest(alice_key)]
    assert (found.user, found.team, found.staff) == (alice.pk, team.pk, False)
    assert table.callers[token_digest(staff_key)].staff
    entry = table.models["m"]
    assert (entry.owner, entry.team, entry.public) == (alice.pk, team.pk, False)
    assert (entry.route.canary_percent, dict(entry.route.labels)) == (20, {"stable": 1,
                                                                           "canary": 2})
    assert stable.model == model
    assert table.models["open"].public and dict(table.models["open"].route.labels) == {}
    assert (table.rate_limit, table.rate_seconds) == (6000, 60.0)  # PLATFORM_THROTTLE_INFERENCE
