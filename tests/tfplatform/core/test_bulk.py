"""Many rows in few statements, as the model would store them."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import ExperimentFactory
from tfplatform.accounts.models import Team, User
from tfplatform.core.bulk import SQLITE_PARAMETERS, ids_match, rows_insert
from tfplatform.experiments.models import Experiment, Trial

pytestmark = pytest.mark.django_db

TEAM_FIELDS = ("name", "gpu_quota", "max_priority", "workspace_max_hours", "created_at")


def _inserts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].startswith("INSERT")]


def test_rows_go_in_as_given_in_one_statement_on_postgresql_in_batches_elsewhere() -> None:
    now = timezone.now()
    per_statement = SQLITE_PARAMETERS // len(TEAM_FIELDS)
    count = per_statement + 5
    rows = [(f"team-{n}", n % 7, 10, 24, now) for n in range(count)]
    with CaptureQueriesContext(connection) as queries:
        rows_insert(model=Team, fields=TEAM_FIELDS, rows=rows)
    assert len(_inserts(queries)) == (1 if connection.vendor == "postgresql" else 2)
    assert Team.objects.count() == count
    last = Team.objects.get(name=f"team-{count - 1}")
    assert (last.gpu_quota, last.created_at) == ((count - 1) % 7, now)
    assert rows_insert(model=Team, fields=("name",), rows=[]) == []  # no statement, no error


def test_the_statement_text_does_not_grow_with_the_rows_on_postgresql() -> None:
    """So the driver converts it once (psycopg caches by text); SQLite takes a VALUES list."""
    statements: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        rows_insert(model=Team, fields=("name",), rows=[("a",)])
        rows_insert(model=Team, fields=("name",), rows=[(f"b{n}",) for n in range(500)])
    first, second = statements
    assert (first == second) == (connection.vendor == "postgresql")
    assert Team.objects.count() == 501


def test_fields_left_out_take_the_models_defaults_and_returning_names_the_new_rows() -> None:
    experiments = ExperimentFactory.create_batch(3)
    before = timezone.now()
    made = rows_insert(model=Trial, fields=("experiment", "restart_count"),
                       rows=[(e.pk, n) for n, e in enumerate(experiments)],
                       returning=("experiment", "id"))
    ids = dict(made)
    assert sorted(ids) == sorted(e.pk for e in experiments)
    for n, experiment in enumerate(experiments):
        trial = Trial.objects.get(pk=ids[experiment.pk])
        assert trial.experiment_id == experiment.pk and trial.restart_count == n
        # What Trial(...).save() would have stored: defaults, blanks, auto_now_add.
        assert (trial.state, trial.placement, trial.logs, trial.exit_code) == (
            Trial.State.PENDING, {}, "", None)
        assert trial.created_at >= before


def test_a_field_without_a_column_is_refused() -> None:
    with pytest.raises(ValueError, match="has no column"):
        rows_insert(model=Team, fields=("members",), rows=[(1,)])
    assert User.objects.count() == 0


def test_ids_match_finds_exactly_the_ids_given() -> None:
    experiments = ExperimentFactory.create_batch(4)
    wanted = [experiments[0].pk, experiments[2].pk]
    match, params = ids_match(column="id", ids=wanted)
    table = connection.ops.quote_name(Experiment._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} WHERE {match}", params)  # noqa: S608
        assert sorted(row[0] for row in cursor.fetchall()) == sorted(wanted)
