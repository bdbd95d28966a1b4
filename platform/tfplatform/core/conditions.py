"""Conditions on values inside JSON columns, as search filters write them: `lr<0.01`.

A condition holds only where the key is present with a value of the condition's kind (a number
for a number, a string for a string, true or false for a boolean) and the comparison is true, so
`optimizer!=adam` leaves out the runs that never set an optimizer, as a spreadsheet filter would.
Numbers compare as numbers in SQL on both databases (JsonValue), never as JSON text.
"""

import math
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    BooleanField,
    CharField,
    Expression,
    F,
    FloatField,
    Func,
    Q,
    Subquery,
    lookups,
)

from tfplatform.core.errors import InvalidInput

OPERATORS = ("<=", ">=", "!=", "<", ">", "=")


# What a hyperparameter or metric name may be: what Keras and our search spaces name them. The
# name goes into a JSON path on SQLite, so quotes and backslashes are out.
NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,99}"


_CONDITION = re.compile(rf"\s*({NAME_PATTERN})\s*(<=|>=|!=|<|>|=)\s*(.*?)\s*")


VALUE_MAX_CHARS = 300


_LOOKUPS: "dict[str, type[lookups.Lookup[Any]]]" = {
    "<": lookups.LessThan, "<=": lookups.LessThanOrEqual, ">": lookups.GreaterThan,
    ">=": lookups.GreaterThanOrEqual, "=": lookups.Exact,
}


@dataclass(frozen=True)
class Condition:
    name: str
    operator: str
    value: float | str | bool

    @property
    def kind(self) -> str:
        if isinstance(self.value, bool):
            return "boolean"
        return "number" if isinstance(self.value, float) else "string"

    def holds(self, value: Any) -> bool:
        """The same test in Python, on a value read from JSON (None: absent)."""
        if self.kind == "boolean":
            present = isinstance(value, bool)
        elif self.kind == "number":
            present = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            present = isinstance(value, str)
        if not present:
            return False
        wanted = self.value
        return {
            "=": value == wanted, "!=": value != wanted, "<": value < wanted,
            "<=": value <= wanted, ">": value > wanted, ">=": value >= wanted,
        }[self.operator]


def condition_parse(*, text: str, field: str, numbers_only: bool = False) -> Condition:
    match = _CONDITION.fullmatch(text)
    if match is None:
        raise InvalidInput(
            f"{text[:120]!r} is not a condition: write NAME OP VALUE, OP one of "
            f"{', '.join(OPERATORS)} (for example lr<0.01).",
            field=field,
        )
    name, operator, raw = match.groups()
    if not raw or len(raw) > VALUE_MAX_CHARS:
        raise InvalidInput(
            f"{name}: give a value of 1 to {VALUE_MAX_CHARS} characters.", field=field)
    value = _value(raw=raw)
    if numbers_only and not isinstance(value, float):
        raise InvalidInput(f"{name}: metrics compare with numbers, not {raw[:40]!r}.",
                           field=field)
    if not isinstance(value, float) and operator not in ("=", "!="):
        raise InvalidInput(f"{name}: {operator} compares numbers; {raw[:40]!r} is not one.",
                           field=field)
    return Condition(name=name, operator=operator, value=value)


def condition_q(*, condition: Condition, expression: Expression | F | Subquery) -> Q:
    """The condition on `expression`: a JsonValue of its kind, or a float annotation."""
    value = condition.value
    if condition.operator == "!=":
        return Q(lookups.IsNull(expression, False)) & ~Q(lookups.Exact(expression, value))
    return Q(_LOOKUPS[condition.operator](expression, value))


def _value(*, raw: str) -> float | str | bool:
    if raw in ("true", "false"):
        return raw == "true"
    try:
        number = float(raw)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw


class JsonValue(Func):
    """The value under `key` in a JSON object column when it is of `kind` (number, string,
    boolean); NULL when absent or of another kind."""

    _OUTPUT = {"number": FloatField, "string": CharField, "boolean": BooleanField}

    def __init__(self, column: str, *, key: str, kind: str) -> None:
        self.key, self.kind = key, kind
        super().__init__(F(column), output_field=self._OUTPUT[kind]())

    def as_postgresql(self, compiler: Any, connection: Any,
                      **extra: Any) -> tuple[str, tuple[Any, ...]]:
        column, params = compiler.compile(self.source_expressions[0])
        read = {"number": f"({column} ->> %s)::double precision",
                "string": f"({column} ->> %s)",
                "boolean": f"({column} ->> %s)::boolean"}[self.kind]
        return (f"(CASE WHEN jsonb_typeof({column} -> %s) = %s THEN {read} END)",
                (*params, self.key, self.kind, *params, self.key))

    def as_sqlite(self, compiler: Any, connection: Any,
                  **extra: Any) -> tuple[str, tuple[Any, ...]]:
        column, params = compiler.compile(self.source_expressions[0])
        path = f'$."{self.key}"'
        types = {"number": "('integer', 'real')", "string": "('text')",
                 "boolean": "('true', 'false')"}[self.kind]
        read = (f"(json_type({column}, %s) = 'true')" if self.kind == "boolean"
                else f"json_extract({column}, %s)")
        return (f"(CASE WHEN json_type({column}, %s) IN {types} THEN {read} END)",
                (*params, path, *params, path))


def json_value(*, column: str, condition: Condition) -> JsonValue:
    return JsonValue(column, key=condition.name, kind=condition.kind)
