"""Every CSV the platform hands out goes through here: names, hyperparameter values and other
user input must not run as a formula when the file is opened in a spreadsheet (OWASP's CSV
injection guidance)."""

import csv
import re
from collections.abc import Iterable
from typing import Any, Protocol

# A spreadsheet takes a cell starting with one of these as a formula (tab and carriage return
# too: some strip them and read the rest).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
# A plain number, negative ones included, is data to every spreadsheet, never a formula.
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


def csv_cell(value: Any) -> Any:
    """`value` as a spreadsheet will only ever show it: text that would start a formula gets a
    leading `'`; None is an empty cell; anything else is written as it is."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES) and not NUMBER.fullmatch(
            value):
        return "'" + value
    return value


def csv_write_rows(*, out: Writable, rows: Iterable[Iterable[Any]]) -> None:
    """Writes `rows` (the header too) to `out`, every cell through csv_cell."""
    writer = csv.writer(out)
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
