"""The placement rules on plain values: no database, no Django models."""

import subprocess
import sys
from pathlib import Path

from tfplatform.cluster.placement import (
    KIND_CPU,
    KIND_GPU,
    gang_place,
    pending_reason,
    task_needs,
)

ROOT = Path(__file__).resolve().parents[3]


def test_a_gang_goes_best_fit_and_whole_or_not_at_all() -> None:
    free = {1: {KIND_GPU: [10, 11, 12, 13]}, 2: {KIND_GPU: [20, 21]}, 3: {KIND_CPU: [30]}}
    needs = task_needs(workers=2, gpus_per_worker=2, parameter_servers=1)
    placed = gang_place(needs=needs, free=free)
    assert placed is not None
    # The smallest block that fits first: node 2's pair, then half of node 1; the ps a CPU slot.
    assert [(p.node_id, p.device_ids, p.need.task_type) for p in placed] == [
        (2, (20, 21), "worker"), (1, (10, 11), "worker"), (3, (30,), "ps"),
    ]
    assert gang_place(needs=task_needs(workers=1, gpus_per_worker=5, parameter_servers=0),
                      free=free) is None
    assert gang_place(needs=task_needs(workers=4, gpus_per_worker=2, parameter_servers=0),
                      free=free) is None  # three pairs exist, not four: nothing is placed


def test_the_reason_a_gang_waits_names_what_is_missing() -> None:
    needs = task_needs(workers=1, gpus_per_worker=4, parameter_servers=0)
    assert pending_reason(needs=needs, free={}) == "No worker node is online and accepting work."
    assert pending_reason(needs=needs, free={1: {KIND_GPU: [1, 2]}, 2: {KIND_GPU: [3]}}) == (
        "Needs 4 GPUs on one node; the largest free block is 2."
    )


def test_the_placement_module_loads_without_django() -> None:
    code = (
        "import sys; import tfplatform.cluster.placement; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )
    answer = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": f"{ROOT / 'platform'}", "PATH": "/usr/bin:/bin"},
    )
    assert answer.stdout.strip() == "[]"
