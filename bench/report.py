"""What a benchmark reports (tables, targets, plots) and the Markdown it is written as."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    title: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"row {row} has {len(row)} cells for {len(self.columns)} columns")


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None  # None: could not be measured in this run
    comparison: str  # ">=" or "<="
    threshold: float
    unit: str = ""

    def __post_init__(self) -> None:
        if self.comparison not in (">=", "<="):
            raise ValueError(f"comparison must be >= or <=, not {self.comparison}")

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        if self.comparison == ">=":
            return self.value >= self.threshold
        return self.value <= self.threshold

    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "not measured"}[self.met]


@dataclass(frozen=True)
class BarChart:
    """A grouped bar chart: one group per category, one bar per series."""

    filename: str
    title: str
    ylabel: str
    categories: tuple[str, ...]
    series: dict[str, tuple[float | None, ...]]
    log_scale: bool = False


@dataclass(frozen=True)
class LineChart:
    """Curves over a shared x axis: one line of (x, y) points per series."""

    filename: str
    title: str
    xlabel: str
    ylabel: str
    series: dict[str, tuple[tuple[float, float], ...]]
    log_scale: bool = False


@dataclass
class Section:
    title: str
    description: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    charts: list[BarChart | LineChart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    failed: bool = False


# A failed item's report keeps the end of its traceback: where it failed, not the whole stack.
FAILURE_LINES = 20


def failure_section(*, title: str, error: BaseException, seconds: float) -> Section:
    lines = traceback.format_exception(error)
    tail = "".join(lines).rstrip().splitlines()[-FAILURE_LINES:]
    return Section(
        title=f"{title}: FAILED",
        description=(f"This item failed after {seconds:.0f} s and measured nothing: "
                     f"{type(error).__name__}: {' '.join(str(error).split())[:500]}\n\n"
                     "```\n" + "\n".join(tail) + "\n```"),
        seconds=seconds, failed=True,
    )


def number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """A table cell: thousands separators, fixed decimals, and "—" for what was not measured."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"


def table_markdown(table: Table) -> list[str]:
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    lines = [f"**{table.title}**", ""] if table.title else []
    lines += [cells(table.columns), "|" + "---|" * len(table.columns)]
    lines += [cells(row) for row in table.rows]
    return [*lines, ""]


def targets_table(targets: Sequence[Target]) -> Table:
    return Table(
        columns=("target", "measured", "goal", "verdict"),
        rows=[
            (
                t.name,
                number(t.value, 2, t.unit),
                # Rounded as the measured figures are: a goal taken from a peer's run is one.
                f"{t.comparison} {round(t.threshold, 2):g}{t.unit}",
                t.verdict(),
            )
            for t in targets
        ],
    )


def section_markdown(section: Section, *, plots_dir: str) -> list[str]:
    lines = [f"## {section.title}", "", section.description, ""]
    for table in section.tables:
        lines += table_markdown(table)
    if section.targets:
        lines += table_markdown(targets_table(section.targets))
    lines += [f"- {note}" for note in section.notes]
    if section.notes:
        lines.append("")
    for chart in section.charts:
        lines += [f"![{chart.title}]({plots_dir}/{chart.filename})", ""]
    lines += [f"_{section.seconds:.0f} s._", ""]
    return lines


def report_markdown(
    *, title: str, machine: str, versions: str, sections: Sequence[Section], plots_dir: str,
    total_seconds: float,
) -> str:
    lines = [f"# {title}", "", f"Machine: {machine}", "", f"Versions: {versions}", ""]
    every = [t for s in sections for t in s.targets]
    if every:
        met = sum(1 for t in every if t.met)
        lines += [f"Targets met: {met} of {len(every)}.", ""]
        lines += table_markdown(targets_table(every))
    for section in sections:
        lines += section_markdown(section, plots_dir=plots_dir)
    lines += [f"Total run time: {total_seconds / 60:.1f} min.", ""]
    return "\n".join(lines)


def table_text(table: Table) -> str:
    """Plain-text columns for the terminal."""
    widths = [
        max(len(table.columns[i]), *(len(r[i]) for r in table.rows)) if table.rows
        else len(table.columns[i])
        for i in range(len(table.columns))
    ]
    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [table.title] if table.title else []
    out += [line(table.columns), line(["-" * w for w in widths])]
    out += [line(row) for row in table.rows]
    return "\n".join(out)


def section_text(section: Section) -> str:
    parts = [f"== {section.title} ({section.seconds:.0f} s)"]
    parts += [table_text(t) for t in section.tables]
    if section.targets:
        parts.append(table_text(targets_table(section.targets)))
    parts += [f"- {note}" for note in section.notes]
    return "\n\n".join(parts)
