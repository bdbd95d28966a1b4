"""The one CSV-escaping helper every export uses (OWASP's CSV injection prefixes)."""

import csv
import io

import pytest

from tfplatform.core.csv_export import csv_cell, csv_write_rows


@pytest.mark.parametrize("text", ["=HYPERLINK(\"http://x\")", "+1+cmd|' /C calc'!A0",
                                  "-2+3", "@SUM(A1)", "\t=1+1", "\r=1+1"])
def test_text_that_would_start_a_formula_gets_a_leading_quote(text: str) -> None:
    assert csv_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["adam", "a=b", "", " =1", 3, -2.5, 0.1, True])
def test_anything_else_is_written_as_it_is(value: object) -> None:
    assert csv_cell(value) == value


@pytest.mark.parametrize("number", ["-2", "-0.25", "+3", "-1e-05", "-.5"])
def test_a_plain_number_is_data_not_a_formula(number: str) -> None:
    assert csv_cell(number) == number


def test_rows_header_included_go_through_it_and_none_is_empty() -> None:
    out = io.StringIO()
    csv_write_rows(out=out, rows=[["name", "=evil"], ["\tx", None]])
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [["name", "'=evil"], ["'\tx", ""]]
