"""The GPU-sharing benchmark's simulation: its trace's demand, and a small day through the real
scheduler under both policies, every job finishing and the report's targets computed."""

import pytest

from bench.report import section_text
from bench.sharing import sharing_section
from bench.sharing_child import DAY, GPUS_PER_NODE, LOAD, TEAMS, simulate, trace_make
from tests.fixtures_settings import PlatformSettingsOverride

pytestmark = pytest.mark.django_db


def test_the_trace_asks_for_the_clusters_gpu_day_a_third_of_it_in_shares() -> None:
    trace = trace_make(jobs=300, seed=1, capacity=16)
    demand = sum(j.duration * j.workers * (j.gpus_per_worker or j.gpu_milli / 1000)
                 for j in trace)
    assert demand == pytest.approx(LOAD * 16 * DAY)
    shared = [j for j in trace if j.gpu_milli]
    assert 60 < len(shared) < 140 and all(not j.gpus_per_worker for j in shared)
    assert {j.team for j in trace} == set(TEAMS)
    assert [j.arrival for j in trace] == sorted(j.arrival for j in trace)


def test_a_small_day_finishes_under_both_policies_and_reports_them(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_max_running=0)
    trace = trace_make(jobs=40, seed=2, capacity=2 * GPUS_PER_NODE)
    results = [simulate(trace=trace, nodes=2, policy=policy) for policy in ("today", "sharing")]
    for result in results:
        assert result["unfinished"] == 0
        assert 0 < result["allocation"] <= 1
        assert sum(result["team_share"].values()) == pytest.approx(result["allocation"])
    section = sharing_section(result={"jobs": 40, "nodes": 2, "results": results}, seconds=1.0)
    text = section_text(section)
    assert "GPU allocation gain" in text and "today: whole GPUs, hard quotas" in text
    assert all(target.value is not None for target in section.targets)
