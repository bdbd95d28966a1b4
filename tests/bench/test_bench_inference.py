"""The inference section's figures: CPU per path, the bound on batching's gain, the gain itself."""

import pytest

from bench.inference import _batching_bound_note, _cpu_rows, _cpu_total, batching_gain
from bench.loadgen import LoadResult


def cpu_shares() -> dict:
    per_path = {  # load generator, web, model server (ms per request)
        "direct": ((0.5, 9.0, 9.0), (0.3, 9.0, 9.0)),
        "floor REST": ((1.0, 9.0, 9.0), (1.0, 9.0, 9.0)),
        "Ray Serve REST": ((1.0, 9.0, 9.0), (1.0, 9.0, 9.0)),
        "embedded gRPC": ((0.4, 9.0, 1.6), (0.4, 9.0, 1.4)),
        "embedded REST": ((1.0, 9.0, 1.0), (1.0, 9.0, 0.8)),
        "front gRPC": ((0.4, 9.0, 1.7), (0.4, 9.0, 1.5)),
        "front REST": ((1.0, 9.0, 1.1), (1.0, 9.0, 0.9)),
        "gateway gRPC": ((0.4, 9.0, 1.7), (0.4, 9.0, 1.5)),
        "gateway REST": ((1.0, 9.0, 1.1), (1.0, 9.0, 0.9)),
        "platform REST": ((1.0, 1.5, 1.0), (1.0, 1.5, 0.8)),
    }
    return {
        (path, batching, 8): [{"load generator": lg, "web": web, "gateway": 0.5,
                               "model server": server, "floor server": 0.7, "Ray Serve": 2.5}]
        for path, rows in per_path.items()
        for batching, (lg, web, server) in zip(("off", "on"), rows, strict=True)
    }


def test_only_processes_on_the_path_count() -> None:
    cpu = cpu_shares()
    assert _cpu_total(cpu, ("direct", "off", 8)) == 0.5  # everything runs in the client
    assert _cpu_total(cpu, ("embedded gRPC", "off", 8)) == 0.4 + 1.6
    assert _cpu_total(cpu, ("platform REST", "on", 8)) == 1.0 + 1.5 + 0.8
    rows = {(r[0], r[1]): r for r in _cpu_rows(cpu)}
    assert rows["embedded gRPC", "off"][2:] == ("0.40", "—", "—", "1.60", "—", "—", "2.00")
    # The front is the model server's own: no web app on its path.
    assert rows["front REST", "on"][2:] == ("1.00", "—", "—", "0.90", "—", "—", "1.90")
    # The gateway is a process of its own before the server; the web app is not on its path.
    assert rows["gateway REST", "on"][2:] == ("1.00", "—", "0.50", "0.90", "—", "—", "2.40")
    # The peers are servers of their own, each alone on its path.
    assert rows["floor REST", "off"][2:] == ("1.00", "—", "—", "—", "0.70", "—", "1.70")
    assert rows["Ray Serve REST", "on"][2:] == ("1.00", "—", "—", "—", "—", "2.50", "3.50")


def test_the_bound_divides_a_request_by_what_batching_saved() -> None:
    note = _batching_bound_note(cpu_shares(), model="dense")
    # 0.2 ms saved in-process: gRPC 2.00 → 2.00 / 1.80, REST 2.00 → the same.
    assert "saved 0.20 ms" in note
    assert "embedded gRPC 2.00 ms → at most 1.11×" in note


def runs(*rates: float) -> list[LoadResult]:
    return [LoadResult(latencies_ms=[1.0] * int(rate), seconds=1.0) for rate in rates]


def test_the_gain_is_the_median_of_back_to_back_ratios() -> None:
    # The machine drifts between rounds; within a round both runs see the same machine.
    results = {("embedded gRPC", "on", 8): runs(300, 1000, 2000),
               ("embedded gRPC", "off", 8): runs(100, 1000, 1000)}
    # Ratios 3.0, 1.0, 2.0 → 2.0; the ratio of the medians would say 1000 / 1000 = 1.0.
    assert batching_gain(results, name="embedded gRPC") == 2.0


def test_a_round_without_its_pair_is_refused() -> None:
    results = {("embedded REST", "on", 8): runs(300, 200),
               ("embedded REST", "off", 8): runs(100)}
    with pytest.raises(ValueError):
        batching_gain(results, name="embedded REST")


def test_each_path_is_compared_with_its_own_base() -> None:
    from bench.inference import (
        BARE,
        BATCHING,
        CONCURRENCY,
        MODELS,
        PATHS,
        Measured,
        _section,
    )

    # Each path's p50 its own: front REST 2.0, embedded REST 1.5, floor REST 1.0 ms, …
    p50 = {name: 1.0 + index * 0.25 for index, name in enumerate(PATHS)}
    p50 |= {"floor REST": 1.0, "embedded REST": 1.5, "front REST": 2.0, "platform REST": 4.0,
            "Ray Serve REST": 2.75}
    results = {(name, batching, concurrency): [LoadResult([p50[name]] * 3, 1.0)]
               for name in PATHS for batching in BATCHING for concurrency in CONCURRENCY}
    results[BARE] = [LoadResult([0.5], 1.0)]
    cpu = {key: [{side: 0.1 for side in ("load generator", "web", "gateway", "model server",
                                         "floor server", "Ray Serve")}]
           for key in results if key != BARE and key[2] == 8}
    section = _section(measured={m.label: Measured(results=results, merged=[8.0], cpu=cpu)
                                 for m in MODELS}, rounds=1, requests_per_thread=3, seconds=1.0)
    [added] = [t for t in section.tables if t.title.startswith("What the platform adds")]
    rows = {row[1]: row[2:] for row in added.rows if row[0] == "dense"}
    assert rows["front REST − embedded REST"] == ("0.50", "0.50")
    assert rows["front REST − floor REST"] == ("1.00", "1.00")
    assert rows["platform REST − embedded REST"] == ("2.50", "2.50")
    assert rows["platform REST − floor REST"] == ("3.00", "3.00")
    assert rows["Ray Serve REST − floor REST"] == ("1.75", "1.75")
    assert section.targets[0].value == pytest.approx(0.5)
    # Against Ray Serve, each over the floor: the front's 1.00 ms against Ray's 1.75.
    [ray] = [t for t in section.targets if "Ray Serve REST − floor REST" in t.name]
    assert (ray.value, ray.threshold, ray.met) == (pytest.approx(1.0), pytest.approx(1.75), True)
