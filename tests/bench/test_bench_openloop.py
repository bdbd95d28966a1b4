"""The open-loop generator against a real aiohttp server, and the sweep's judgement of its runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from bench.batching_sweep import (
    FIRST_RATE,
    P99_BOUND_MS,
    RATE_STEP,
    Step,
    best_throughput,
    rate_sweep,
    sweep_section,
)
from bench.net import free_port
from bench.openloop import OpenLoopResult, open_loop_run


def _against(handler: Callable[[web.Request], Awaitable[web.Response]], *, rate: float,
             seconds: float, max_in_flight: int) -> OpenLoopResult:
    async def run() -> OpenLoopResult:
        app = web.Application()
        app.router.add_post("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            return await open_loop_run(url=f"http://127.0.0.1:{port}/", body=b"{}", rate=rate,
                                       seconds=seconds, max_in_flight=max_in_flight)
        finally:
            await runner.cleanup()

    return asyncio.run(run())


def test_requests_leave_on_schedule_and_are_all_answered() -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"predictions": [1]})

    # Room for all 100 at once: on a loaded machine (the suite's workers) server and generator
    # share one starved event loop, and a cap of 16 dropped one (the cap is tested below).
    result = _against(ok, rate=200, seconds=0.5, max_in_flight=100)
    assert (result.sent, result.answered, result.errors, result.dropped) == (100, 100, 0, 0)
    assert 0.45 < result.seconds < 2 and len(result.latencies_ms) == 100


def test_a_slow_server_is_not_waited_for_the_excess_is_dropped_and_counted() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.2)
        return web.json_response({})

    # 100/s for 0.5 s against 0.2 s answers with 4 in flight at most: the 5th send finds 4 out.
    result = _against(slow, rate=100, seconds=0.5, max_in_flight=4)
    assert result.sent + result.dropped == 50 and result.dropped > 30
    assert result.answered == result.sent
    # Latency counts from the scheduled send: the wait for a free slot is not hidden.
    assert min(result.latencies_ms) >= 190


def test_errors_are_counted_not_timed() -> None:
    async def failing(request: web.Request) -> web.Response:
        return web.json_response({"error": "no"}, status=500)

    result = _against(failing, rate=100, seconds=0.2, max_in_flight=8)
    assert result.errors == result.sent == 20 and not result.latencies_ms


def _result(*, sent: int, answered: int, p99: float, seconds: float = 1.0) -> OpenLoopResult:
    return OpenLoopResult(sent=sent, answered=answered, seconds=seconds,
                          latencies_ms=[1.0] * 98 + [p99] * 2)


def test_the_sweep_rises_until_two_misses_and_keeps_the_best_step_within_bound() -> None:
    capacity = 300.0

    def measure(rate: float) -> OpenLoopResult:
        if rate <= capacity:
            return _result(sent=int(rate), answered=int(rate), p99=10.0)
        return _result(sent=int(rate), answered=int(rate), p99=P99_BOUND_MS * 3)

    steps = rate_sweep(measure=measure)
    rates = [s.rate for s in steps]
    assert rates[0] == FIRST_RATE and rates[1] == FIRST_RATE * RATE_STEP
    assert [s.within_bound for s in steps][-2:] == [False, False]
    assert sum(not s.within_bound for s in steps) == 2
    assert best_throughput(steps) == max(int(r) for r in rates if r <= capacity)


def test_a_step_with_a_drop_or_an_unanswered_request_was_not_kept_up_with() -> None:
    assert not Step(rate=10, result=OpenLoopResult(sent=9, answered=9, dropped=1, seconds=1,
                                                   latencies_ms=[1.0] * 9)).within_bound
    assert not Step(rate=10, result=_result(sent=10, answered=9, p99=1.0)).within_bound
    assert best_throughput([Step(rate=10, result=_result(sent=10, answered=9, p99=1.0))]) == 0


def test_the_target_is_on_over_off_of_the_embedded_servers_best() -> None:
    def steps(best: int) -> list[Step]:
        return [Step(rate=best, result=_result(sent=best, answered=best, p99=5.0)),
                Step(rate=best * 2, result=_result(sent=best * 2, answered=best, p99=500.0))]

    section = sweep_section(sweeps={("embedded REST", "off"): steps(200),
                                    ("embedded REST", "on"): steps(600),
                                    ("floor REST", "off"): steps(100),
                                    ("floor REST", "on"): steps(0),
                                    ("Ray Serve REST", "off"): steps(100),
                                    ("Ray Serve REST", "on"): steps(250)},
                            seconds=1.0, step_seconds=1.0)
    assert section.targets[0].value == 3.0
    best = {row[0]: row[1:] for row in section.tables[0].rows}
    assert best["floor REST"] == ("100", "0", "0.00")
    # Against Ray Serve's gain in the same run: 3.0 against 2.5.
    assert (section.targets[1].value, section.targets[1].threshold) == (3.0, 2.5)
    assert section.targets[1].met


def test_without_ray_serves_gain_its_comparison_is_not_measured() -> None:
    kept = [Step(rate=100, result=_result(sent=100, answered=100, p99=5.0))]
    behind = [Step(rate=100, result=_result(sent=100, answered=50, p99=500.0))]
    section = sweep_section(sweeps={("embedded REST", "off"): kept, ("embedded REST", "on"): kept,
                                    ("floor REST", "off"): kept, ("floor REST", "on"): kept,
                                    ("Ray Serve REST", "off"): behind,
                                    ("Ray Serve REST", "on"): kept},
                            seconds=1.0, step_seconds=1.0)
    assert section.targets[1].verdict() == "not measured"
