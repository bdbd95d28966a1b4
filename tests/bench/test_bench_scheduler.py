"""The scheduler benchmark's child process and its report, on a small queue in SQLite."""

from pathlib import Path

import pytest

from bench.report import section_text
from bench.scheduler import child_run, scheduler_section, sqlite_database

pytestmark = pytest.mark.slow


def test_a_queue_of_any_size_is_measured_and_a_run_without_a_drain_is_reported(
    tmp_path: Path
) -> None:
    with sqlite_database(tmp_path) as url:
        result = child_run(database_url=url, var_dir=tmp_path, repeats=1, queued=60, nodes=6,
                           drain=False)
    assert (result["queued"], result["nodes"]) == (60, 6)
    assert "drain" not in result
    [cold] = result["cold"]
    assert cold["queued"] == 60 and 0 < cold["scheduled"] <= 60
    text = section_text(scheduler_section(results=[result], notes=[], repeats=1, seconds=1.0))
    assert "60 × 6" in text and "cold: idle cluster" in text
    assert "decisions/s, 60 × 6, cold pass (SQLite" in text
    assert ">= 1000" in text  # a size other than 1,000 × 50 is held to the large queue's goal
