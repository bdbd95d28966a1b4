"""Result tables, targets and the Markdown report."""

from pathlib import Path

import pytest

from bench.__main__ import Report, _arguments
from bench.report import (
    BarChart,
    Section,
    Table,
    Target,
    number,
    report_markdown,
    section_text,
    table_markdown,
    targets_table,
)


def test_table_rows_must_match_the_columns() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        Table(columns=("a", "b", "c"), rows=[("1", "2")])


def test_target_verdicts() -> None:
    assert Target("ratio", 0.98, ">=", 0.97).verdict() == "met"
    assert Target("ratio", 0.96, ">=", 0.97).verdict() == "MISSED"
    assert Target("latency", 2.0, "<=", 2.0).met is True
    assert Target("latency", 2.1, "<=", 2.0).met is False
    assert Target("first step", None, "<=", 1.0).verdict() == "not measured"
    with pytest.raises(ValueError, match="comparison"):
        Target("x", 1.0, "==", 1.0)


def test_a_goal_from_a_peers_run_is_rounded_as_the_figures_are() -> None:
    [row] = targets_table([Target("overhead", 1.0, "<=", 20.8756, " ms")]).rows
    assert row[2] == "<= 20.88 ms"
    [row] = targets_table([Target("gain", 3.0, ">=", 2.5)]).rows
    assert row[2] == ">= 2.5"


def test_numbers_are_formatted_for_tables() -> None:
    assert number(12345.678, 0) == "12,346"
    assert number(0.5, 2, " ms") == "0.50 ms"
    assert number(None) == "—"


def test_markdown_has_every_table_target_and_plot() -> None:
    section = Section(
        title="3. Inference",
        description="What was measured.",
        tables=[Table(columns=("path", "p50 | ms"), rows=[("direct", "0.10")], title="Latency")],
        targets=[Target("batching gain", 1.2, ">=", 1.5)],
        charts=[BarChart("latency.png", "Latency", "ms", ("direct",), {"p50": (0.1,)})],
        notes=["Clients share the cores."],
        seconds=42.0,
    )
    text = report_markdown(title="Benchmarks 2026-01-01", machine="2 cores", versions="TF 2.21",
                           sections=[section], plots_dir="2026-01-01", total_seconds=90)
    assert text.startswith("# Benchmarks 2026-01-01\n")
    assert "Machine: 2 cores" in text and "Versions: TF 2.21" in text
    assert "Targets met: 0 of 1." in text
    assert "| batching gain | 1.20 | >= 1.5 | MISSED |" in text
    assert "| path | p50 \\| ms |\n|---|---|\n| direct | 0.10 |" in text
    assert "![Latency](2026-01-01/latency.png)" in text
    assert "- Clients share the cores." in text
    assert "Total run time: 1.5 min." in text
    assert "p50 | ms" in section_text(section) and "MISSED" in section_text(section)


def test_table_markdown_without_title_starts_with_the_header() -> None:
    lines = table_markdown(Table(columns=("a",), rows=[("1",)]))
    assert lines == ["| a |", "|---|", "| 1 |", ""]


def test_the_report_is_written_as_each_item_ends_and_a_failed_item_keeps_its_place(
    tmp_path: Path
) -> None:
    report = Report(args=_arguments(["--only", "scheduler,dispatch", "--results",
                                     str(tmp_path)]))

    def drain_that_times_out() -> Section:
        raise TimeoutError("the queue did not drain in 300s")

    report.measure("scheduler", drain_that_times_out)
    [written] = tmp_path.glob("*-scheduler-dispatch.md")
    text = written.read_text()
    assert "## 4. Scheduler: FAILED" in text
    assert "TimeoutError: the queue did not drain in 300s" in text
    assert "in drain_that_times_out" in text  # the traceback's end, where it failed
    report.measure("dispatch", lambda: Section(title="5. Celery dispatch", description="ok"))
    text = written.read_text()
    assert text.index("## 4. Scheduler: FAILED") < text.index("## 5. Celery dispatch")
    assert report.failed == ["4. Scheduler: FAILED"]
