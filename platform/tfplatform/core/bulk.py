"""Writing many rows in few statements, for the hot paths that write hundreds at once.

Django's bulk_create prepares every value of every row through its field (10–20 µs each here):
for a scheduling pass at 1,000 queued, its trials and allocations took as long as all of the
pass's decisions. Here the values that vary are given as the column stores them (ids, strings,
integers, aware datetimes), and every other field takes its model default, prepared once.

On PostgreSQL each statement takes one array per column (`unnest`), so its text is the same
whatever the row count: the driver converts it once and caches it, where a VALUES list of a
thousand marks was converted anew at every pass. SQLite takes a VALUES list in batches.
"""

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.db.models.fields import AutoFieldMixin
from django.db.models.functions import Now
from django.db.models.sql import Query

# Parameters per SQLite statement: within its limit of 32,766.
SQLITE_PARAMETERS = 30_000


def rows_insert(*, model: type[Model], fields: Sequence[str], rows: Sequence[Sequence[Any]],
                returning: Sequence[str] = ()) -> list[tuple[Any, ...]]:
    """INSERT `rows` (values in the order of `fields`, model field names) into `model`; the
    other fields take their defaults, as Model.save would give them. Returns the `returning`
    fields' values of the new rows, in no particular order."""
    if not rows:
        return []
    given = [_field(model=model, name=name) for name in fields]
    defaults = _defaults(model=model, given=given)
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(_column(field=f)) for f in [*given, *defaults])
    back = (" RETURNING " + ", ".join(quote(_column(field=_field(model=model, name=n)))
                                      for n in returning)) if returning else ""
    constants = list(defaults.values())
    made: list[tuple[Any, ...]] = []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%s::{f.cast_db_type(connection)}[]" for f in given)
            selected = ", ".join([*(f"u.c{i}" for i in range(len(given))),
                                  *(f"%s::{f.cast_db_type(connection)}" for f in defaults)])
            names = ", ".join(f"c{i}" for i in range(len(given)))
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {selected}"  # noqa: S608 - model's names
                f" FROM unnest({arrays}) AS u({names}){back}",
                [*constants, *(list(column) for column in zip(*rows, strict=True))],
            )
            return [tuple(row) for row in cursor.fetchall()] if returning else []
        per_row = len(given) + len(defaults)
        row_marks = "(" + ", ".join(["%s"] * per_row) + ")"
        step = max(1, SQLITE_PARAMETERS // per_row)
        for start in range(0, len(rows), step):
            batch = rows[start : start + step]
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES "  # noqa: S608 - the model's names
                + ", ".join([row_marks] * len(batch)) + back,
                [value for row in batch for value in (*row, *constants)],
            )
            if returning:
                made.extend(tuple(row) for row in cursor.fetchall())
    return made


def ids_match(*, column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
    """A WHERE condition for `column` being one of `ids`, and its parameters: one array on
    PostgreSQL (the same statement text for any count), a list of marks elsewhere."""
    name = connection.ops.quote_name(column)
    if connection.vendor == "postgresql":
        return f"{name} = ANY(%s)", [list(ids)]
    return f"{name} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def database_now(*, model: type[Model]) -> tuple[str, list[Any]]:
    """The database's clock as Django's Now() writes it for this database, for raw statements
    whose rows are compared with Now() later (one clock, not the web app's and the database's)."""
    compiler = connection.ops.compiler("SQLCompiler")(Query(model), connection, None)
    sql, params = compiler.compile(Now())
    return sql, list(params)


def _field(*, model: type[Model], name: str) -> Field:
    field = model._meta.get_field(name)
    column = getattr(field, "column", None)  # None for a reverse relation: not insertable
    if not isinstance(field, Field) or not isinstance(column, str):
        raise ValueError(f"{model.__name__}.{name} has no column to insert into")
    return field


def _column(*, field: Field) -> str:
    assert field.column is not None  # _field and concrete_fields hold only fields with one
    return field.column


def _defaults(*, model: type[Model], given: list[Field]) -> dict[Field, Any]:
    """Every other column's value as Django would store it for a new row (auto_now_add is
    now), prepared once for all the rows."""
    blank = model()
    return {
        field: field.get_db_prep_save(field.pre_save(blank, add=True), connection=connection)
        for field in model._meta.concrete_fields
        if field not in given and not isinstance(field, AutoFieldMixin)
    }
