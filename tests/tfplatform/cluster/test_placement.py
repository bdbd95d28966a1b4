"""The placement rules on plain values: no database, no Django models."""

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tfplatform.cluster.placement import (
    KIND_CPU,
    KIND_GPU,
    ClusterView,
    FreeMap,
    Holder,
    backfill_plan,
    gang_place,
    holders_fewest,
    need_kind,
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


def test_several_cpu_slots_go_to_one_node_best_fit() -> None:
    free = {1: {KIND_CPU: [10, 11]}, 2: {KIND_CPU: [20, 21, 22, 23]}, 3: {KIND_CPU: [30, 31, 32]}}
    needs = task_needs(workers=1, gpus_per_worker=0, parameter_servers=0, cpu_slots_per_worker=3)
    placed = gang_place(needs=needs, free=free)
    assert placed is not None
    # The smallest block of three: node 3's, whole; never two slots here and one there.
    assert [(p.node_id, p.device_ids) for p in placed] == [(3, (30, 31, 32))]
    assert need_kind(need=needs[0]) == (KIND_CPU, 3)
    assert gang_place(needs=task_needs(workers=1, gpus_per_worker=0, parameter_servers=0,
                                       cpu_slots_per_worker=5), free=free) is None
    assert pending_reason(needs=needs, free={1: {KIND_CPU: [10, 11]}, 2: {KIND_CPU: [20]}}) == (
        "Needs 3 CPU slots on one node; the largest free block is 2."
    )
    one = task_needs(workers=1, gpus_per_worker=0, parameter_servers=0)
    assert pending_reason(needs=one, free={1: {}}) == (
        "Waiting for a free CPU slot on a worker node.")


def test_a_task_with_gpus_holds_no_cpu_slot() -> None:
    needs = task_needs(workers=1, gpus_per_worker=1, parameter_servers=0, cpu_slots_per_worker=4)
    assert need_kind(need=needs[0]) == (KIND_GPU, 1)
    placed = gang_place(needs=needs, free={1: {KIND_GPU: [10], KIND_CPU: [11]}})
    assert placed is not None and placed[0].device_ids == (10,)


def _view(*, free: FreeMap, holders: list[Holder]) -> ClusterView:
    return ClusterView(
        hostnames={node: f"node-{node}" for node in free}, free=free,
        idle={node: {k: list(v) for k, v in kinds.items()} for node, kinds in free.items()},
        holders={h.trial_id: h for h in holders},
        device_holder={device: h for h in holders for _, _, device in h.devices},
        quota_gpus={},
    )


def test_freeing_several_cpu_slots_takes_the_fewest_holders_of_one_node() -> None:
    since = datetime(2026, 1, 1, tzinfo=UTC)
    # Node 1: one slot free, two held (one trial each); node 2: one slot, held.
    holders = [
        Holder(trial_id=1, priority=0, since=since, stop_reason="", devices=[(1, KIND_CPU, 11)]),
        Holder(trial_id=2, priority=0, since=since, stop_reason="", devices=[(1, KIND_CPU, 12)]),
        Holder(trial_id=3, priority=0, since=since, stop_reason="", devices=[(2, KIND_CPU, 20)]),
    ]
    view = _view(free={1: {KIND_CPU: [10]}, 2: {KIND_CPU: []}}, holders=holders)
    needs = task_needs(workers=1, gpus_per_worker=0, parameter_servers=0, cpu_slots_per_worker=2)
    found = holders_fewest(view=view, needs=needs, base=[], ordered=[holders[2], holders[0],
                                                                     holders[1]])
    assert found is not None
    placements, chosen = found
    # Node 2's holder frees one slot there, not two on one node: only one of node 1's is needed.
    assert [h.trial_id for h in chosen] == [1]
    assert placements[0].node_id == 1 and sorted(placements[0].device_ids) == [10, 11]
    plan = backfill_plan(view=view, needs=needs)
    assert plan is not None and plan[0].node_id == 1 and len(plan[0].device_ids) == 2
