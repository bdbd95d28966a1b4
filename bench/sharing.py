"""GPU sharing and fair share, simulated over a day's trace through the real scheduler
(bench/sharing_child.py): today's whole-GPU, hard-quota behaviour beside shares of GPUs with
guarantees, borrowing and reclaim, on the same trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Section, Table, Target, number

ROOT = Path(__file__).resolve().parent.parent
TITLE = "9. GPU sharing and fair share"
# Goals (#44): allocation at least 20 points higher, at no worse p95 wait for the team that
# stays within its guarantee.
ALLOCATION_GAIN_POINTS = 20.0
GUARANTEED_TEAM = "research"


def sharing_run(*, jobs: int, nodes: int, var_dir: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "CACHE_URL")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings",
        "DATABASE_URL": f"sqlite:///{var_dir / 'sharing.sqlite3'}",
        "PLATFORM_VAR_DIR": str(var_dir),
        "CELERY_BROKER_URL": "memory://",
        "PLATFORM_LOG_LEVEL": "ERROR",
        # One simulated user per team: the per-user running limit would cap a team at it.
        "PLATFORM_USER_MAX_RUNNING": "0",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
    }
    out = var_dir / "sharing.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.sharing_child", "--out", str(out), "--jobs", str(jobs),
         "--nodes", str(nodes)],
        cwd=ROOT, env=env, capture_output=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sharing_child failed ({done.returncode}):\n"
                           f"{done.stderr.decode(errors='replace')[-3000:]}")
    return dict(json.loads(out.read_text()))


def sharing_measure(*, jobs: int, nodes: int) -> Section:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-sharing-") as scratch:
        result = sharing_run(jobs=jobs, nodes=nodes, var_dir=Path(scratch))
    return sharing_section(result=result, seconds=time.monotonic() - started)


def _hours(seconds: float) -> str:
    return number(seconds / 3600, 2)


def sharing_section(*, result: dict[str, Any], seconds: float) -> Section:
    runs = {run["policy"]: run for run in result["results"]}
    today, sharing = runs["today"], runs["sharing"]
    teams = list(today["team_share"])
    overall = Table(
        columns=("policy", "GPU allocation", "mean wait (h)", "p95 wait (h)", "preempted",
                 "resized", "last job ends (h)"),
        rows=[(name, f"{run['allocation'] * 100:.1f} %", _hours(run["wait"]["mean"]),
               _hours(run["wait"]["p95"]), str(run["preempted"]), str(run.get("resized", 0)),
               _hours(run["makespan"]))
              for name, run in (("today: whole GPUs, hard quotas", today),
                                ("shares + elastic + fair share", sharing))],
        title=f"{result['jobs']:,} jobs on {result['nodes']} nodes × 8 GPUs, one simulated day")
    per_team = Table(
        columns=("team", "guaranteed", "GPU share today", "GPU share sharing",
                 "p95 wait today (h)", "p95 wait sharing (h)"),
        rows=[(team, f"{today['guarantee'][team] * 100:.0f} %",
               f"{today['team_share'][team] * 100:.1f} %",
               f"{sharing['team_share'][team] * 100:.1f} %",
               _hours(today["team_wait"][team]["p95"]),
               _hours(sharing["team_wait"][team]["p95"])) for team in teams],
        title="Per team: share of the cluster's GPU time within the day, against its guarantee")
    gain = (sharing["allocation"] - today["allocation"]) * 100
    guaranteed_today = today["team_wait"][GUARANTEED_TEAM]["p95"]
    guaranteed_sharing = sharing["team_wait"][GUARANTEED_TEAM]["p95"]
    targets = [
        Target("GPU allocation gain, sharing − today (points)", gain, ">=",
               ALLOCATION_GAIN_POINTS),
        Target(f"p95 wait of the guaranteed team ({GUARANTEED_TEAM}), sharing ÷ today",
               guaranteed_sharing / guaranteed_today if guaranteed_today else None, "<=", 1.0),
    ]
    notes = [
        "Allocation: GPU-seconds held within the day ÷ (GPUs × 24 h); today a share is rounded "
        "up to a whole GPU, so it holds (and counts) the whole device.",
        "Half the single-worker jobs of 2 GPUs or more are elastic (1 GPU to their size): today "
        "they run at their size; with sharing they start at the largest size that fits, are "
        "shrunk before anything is preempted whole, and grown onto idle GPUs after "
        "PLATFORM_ELASTIC_GROW_AFTER_SECONDS (simulated). A resize costs nothing here beyond its "
        "restart; a real one loses the time to checkpoint and start again.",
        f"Unfinished at the end: today {today['unfinished']}, sharing {sharing['unfinished']}.",
    ]
    return Section(title=TITLE, description=(
        "A day's trace of mixed jobs (whole GPUs, ¼ or ½ of one, elastic jobs, two priorities, "
        "three teams whose loads peak at different hours, demand equal to the cluster's GPU-day) "
        "through "
        "the real scheduler on a simulated clock, twice: today's whole-GPU, hard-quota "
        "behaviour, and shares of GPUs and elastic jobs with guarantees, borrowing and reclaim."),
        tables=[overall, per_team], targets=targets, notes=notes, seconds=seconds)
