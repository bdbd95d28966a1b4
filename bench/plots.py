"""PNG plots of benchmark results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from bench.report import BarChart, LineChart


def chart_write(chart: BarChart | LineChart, *, directory: Path) -> Path:
    if isinstance(chart, LineChart):
        return line_chart_write(chart, directory=directory)
    return bar_chart_write(chart, directory=directory)


def line_chart_write(chart: LineChart, *, directory: Path) -> Path:
    """Writes the chart as directory/chart.filename, each series a line with its points marked."""
    path = directory / chart.filename
    with _figure(path, size=(7.0, 4.0)) as axes:
        for name, points in chart.series.items():
            axes.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=3,
                      label=name)
        axes.set_xlabel(chart.xlabel)
        axes.set_ylabel(chart.ylabel)
        axes.set_title(chart.title)
        if chart.log_scale:
            axes.set_xscale("log")
            axes.set_yscale("log")
        axes.legend(fontsize=8)
        axes.grid(alpha=0.3)
    return path


def bar_chart_write(chart: BarChart, *, directory: Path) -> Path:
    """Writes the chart as directory/chart.filename; unmeasured values leave a gap."""
    count = len(chart.series)
    width = 0.8 / max(count, 1)
    path = directory / chart.filename
    with _figure(path, size=(max(6.0, 1.3 * len(chart.categories) + 2), 4.0)) as axes:
        for index, (name, values) in enumerate(chart.series.items()):
            if len(values) != len(chart.categories):
                raise ValueError(f"series {name} has {len(values)} values for "
                                 f"{len(chart.categories)} categories")
            positions = [c + (index - (count - 1) / 2) * width for c in range(len(values))]
            heights = [v if v is not None else 0.0 for v in values]
            bars = axes.bar(positions, heights, width, label=name)
            axes.bar_label(bars, labels=[_label(v) for v in values], fontsize=7, padding=2)
        axes.set_xticks(range(len(chart.categories)), chart.categories, fontsize=8)
        axes.set_ylabel(chart.ylabel)
        axes.set_title(chart.title)
        if chart.log_scale:
            axes.set_yscale("log")
        if count > 1:
            axes.legend(fontsize=8)
        axes.grid(axis="y", alpha=0.3)
    return path


@contextlib.contextmanager
def _figure(path: Path, *, size: tuple[float, float]) -> Iterator[Any]:
    """One figure's axes; saved to `path` if drawing them raised nothing, closed either way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=size)
    try:
        yield axes
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)


def _label(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2g}" if value < 1 else f"{value:.1f}"
