"""Plots are real PNG files with what was measured (and gaps for what was not)."""

from pathlib import Path

import matplotlib.image
import pytest

from bench.plots import bar_chart_write
from bench.report import BarChart


@pytest.mark.parametrize("log_scale", [False, True])
def test_bar_chart_writes_a_png(tmp_path: Path, log_scale: bool) -> None:
    chart = BarChart(
        "throughput.png", "Throughput at concurrency 8", "requests/sec",
        ("direct", "embedded gRPC", "platform REST"),
        {"batching off": (9000.0, 1400.0, None), "batching on": (8000.0, 2100.0, 190.0)},
        log_scale=log_scale,
    )
    path = bar_chart_write(chart, directory=tmp_path / "plots")
    assert path == tmp_path / "plots" / "throughput.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width > 500 and height == 400


def test_a_series_must_cover_every_category(tmp_path: Path) -> None:
    chart = BarChart("bad.png", "t", "y", ("a", "b"), {"s": (1.0,)})
    with pytest.raises(ValueError, match="1 values for 2 categories"):
        bar_chart_write(chart, directory=tmp_path)


@pytest.mark.parametrize("log_scale", [False, True])
def test_a_line_chart_is_written_through_the_same_entry(tmp_path: Path, log_scale: bool) -> None:
    from bench.plots import chart_write
    from bench.report import LineChart

    chart = LineChart("sweep.png", "Answered against offered", "offered /s", "answered /s",
                      {"on": ((50.0, 50.0), (100.0, 99.0), (200.0, 150.0)),
                       "off": ((50.0, 50.0), (100.0, 60.0))}, log_scale=log_scale)
    path = chart_write(chart, directory=tmp_path / "plots")
    assert path == tmp_path / "plots" / "sweep.png"
    height, width, _ = matplotlib.image.imread(path).shape
    assert (width, height) == (700, 400)
