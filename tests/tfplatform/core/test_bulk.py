"""Many rows in few statements, as the model would store them."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tfplatform.accounts.models import Team, User
from tfplatform.core.bulk import ROWS_PER_STATEMENT, rows_insert

pytestmark = pytest.mark.django_db


def test_rows_go_in_batches_as_given() -> None:
    now = timezone.now()
    count = ROWS_PER_STATEMENT + 5
    rows = [(f"team-{n}", n % 7, 10, 24, now) for n in range(count)]
    with CaptureQueriesContext(connection) as queries:
        rows_insert(model=Team, fields=("name", "gpu_quota", "max_priority",
                                        "workspace_max_hours", "created_at"), rows=rows)
    assert len([q for q in queries if q["sql"].startswith("INSERT")]) == 2
    assert Team.objects.count() == count
    last = Team.objects.get(name=f"team-{count - 1}")
    assert (last.gpu_quota, last.created_at) == ((count - 1) % 7, now)
    rows_insert(model=Team, fields=("name",), rows=[])  # nothing: no statement, no error


def test_a_field_without_a_column_is_refused() -> None:
    with pytest.raises(ValueError, match="has no column"):
        rows_insert(model=Team, fields=("members",), rows=[(1,)])
    assert User.objects.count() == 0
