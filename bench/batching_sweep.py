"""Item 8: batching measured fairly: each server pinned to one core, an open-loop load generator
on the other, the offered rate swept up until the server falls behind, and each side judged by
the best throughput it sustains within a p99 bound.

At a fixed concurrency of 8 with batches of 8 (the inference item), every client sits in the same
batch and the load generator shares the cores with the server: the ratio measures the pipeline's
shape more than batching. Here the load arrives as it would from many users (bench/openloop.py,
up to MAX_IN_FLIGHT requests outstanding), the server has one core to itself, and batching on and
off are each given the rate at which they do best. The recurrent model (the inference item's),
on the embedded model server's REST port and on the floor peer (bench/floor_server.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from bench import stats
from bench.net import free_port
from bench.openloop import OpenLoopResult
from bench.report import LineChart, Section, Table, Target, number
from bench.stack import ROOT

P99_BOUND_MS = 50.0
BATCHING_GAIN = 2.5
MAX_IN_FLIGHT = 64
# From 10/s: Ray Serve's peer, its whole cluster on the one core, falls behind below 50/s here.
FIRST_RATE, RATE_STEP, MAX_STEPS = 10.0, 1.3, 28
# One batch thread for the one core; batches up to the requests in flight at the rates that
# matter, closed after 2 ms.
SWEEP_BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 2000, "num_batch_threads": 1}
SERVERS = ("embedded REST", "floor REST", "Ray Serve REST")


@dataclass(frozen=True)
class Step:
    rate: float
    result: OpenLoopResult

    @property
    def p99(self) -> float:
        return self._percentile(99)

    @property
    def p50(self) -> float:
        return self._percentile(50)

    def _percentile(self, q: float) -> float:
        """Of the answered requests; with none answered, no latency is within any bound."""
        latencies = self.result.latencies_ms
        return stats.percentile(latencies, q) if latencies else float("inf")

    @property
    def within_bound(self) -> bool:
        """Kept up: everything sent was answered, nothing was dropped, the tail within bound."""
        r = self.result
        return (not r.errors and not r.dropped and r.answered == r.sent
                and self.p99 <= P99_BOUND_MS)


def best_throughput(steps: list[Step]) -> float:
    """The most requests per second answered at a rate the server kept up with (0: none)."""
    return max((s.result.throughput for s in steps if s.within_bound), default=0.0)


def rate_sweep(*, measure: Callable[[float], OpenLoopResult]) -> list[Step]:
    """Rates rising geometrically until the server falls behind twice running (one miss can be
    this machine's noise)."""
    steps: list[Step] = []
    rate, misses = FIRST_RATE, 0
    for _ in range(MAX_STEPS):
        step = Step(rate=rate, result=measure(rate))
        steps.append(step)
        misses = 0 if step.within_bound else misses + 1
        if misses == 2:
            break
        rate *= RATE_STEP
    return steps


def _pinned(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})


def open_loop_measure(*, url: str, body: Path, rate: float, seconds: float,
                      cpu: int) -> OpenLoopResult:
    done = subprocess.run(
        [sys.executable, "-m", "bench.openloop", f"--url={url}", f"--body={body}",
         f"--rate={rate}", f"--seconds={seconds}", f"--max_in_flight={MAX_IN_FLIGHT}"],
        cwd=ROOT, capture_output=True, check=True, timeout=seconds * 10 + 60,
        preexec_fn=_pinned(cpu))
    return OpenLoopResult(**json.loads(done.stdout))


# Pins itself once started (bench/ray_peer.py --pin_cpus), and says so in its log.
SELF_PINNED = {"Ray Serve REST": "ray serve answering"}


def server_args(*, server: str, batching: bool, name: str, export: Path, base: Path,
                port: int, parameters: Path, cpu: int) -> list[str]:
    """One core, one thread running each request's (or batch's) ops inline."""
    batch = SWEEP_BATCHING
    peers = {"floor REST": "bench.floor_server", "Ray Serve REST": "bench.ray_peer"}
    if server in peers:
        flags = [f"--max_batch_size={batch['max_batch_size']}",
                 f"--batch_timeout_micros={batch['batch_timeout_micros']}",
                 f"--num_batch_threads={batch['num_batch_threads']}"] if batching else []
        if server in SELF_PINNED:
            flags.append(f"--pin_cpus={cpu}")
        return [sys.executable, "-m", peers[server], f"--port={port}",
                f"--model={name}={export}", "--intra_op_parallelism=1",
                "--inter_op_parallelism=-1", *flags]
    flags = ["--enable_batching", f"--batching_parameters_file={parameters}"] if batching else []
    return [sys.executable, "-m", "serving", f"--port={free_port()}", f"--rest_api_port={port}",
            f"--model_name={name}", f"--model_base_path={base}", "--host=127.0.0.1",
            "--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=-1",
            *flags]


@contextmanager
def server_running(args: list[str], *, url: str, body: bytes, cpu: int | None,
                   log: Path, ready_line: str = "") -> Iterator[None]:
    """Started (on `cpu`, unless it pins itself) and answering `body` at `url`, after writing
    `ready_line` to its log when one is given."""
    started_at = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=None if cpu is None else _pinned(cpu),
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[2]} did not start: {log.read_text()[-2000:]}")
            try:
                said = ready_line.encode() in log.read_bytes()[started_at:]
                if said and requests.post(url, data=body, timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.3)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def batching_sweep_measure(*, seconds: float) -> Section:
    from bench.inference import RECURRENT, model_export

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("the sweep needs two CPUs: one for the server, one for the load")
    server_cpu, load_cpu = cpus[0], cpus[1]
    started = time.monotonic()
    sweeps: dict[tuple[str, str], list[Step]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as scratch:
        folder = Path(scratch)
        export, row = model_export(model=RECURRENT, directory=folder / "export")
        base = folder / "base" / RECURRENT.name
        base.mkdir(parents=True)
        (base / "1").symlink_to(export)
        parameters = folder / "batching.txt"
        parameters.write_text("".join(f"{k} {{ value: {v} }}\n"
                                      for k, v in SWEEP_BATCHING.items()))
        body = folder / "body.json"
        body.write_bytes(json.dumps({"instances": row.tolist()}).encode())
        for server in SERVERS:
            for batching in ("off", "on"):
                port = free_port()
                url = f"http://127.0.0.1:{port}/v1/models/{RECURRENT.name}:predict"
                args = server_args(server=server, batching=batching == "on",
                                   name=RECURRENT.name, export=export, base=base, port=port,
                                   parameters=parameters, cpu=server_cpu)
                def measure(rate: float, url: str = url) -> OpenLoopResult:
                    return open_loop_measure(url=url, body=body, rate=rate, seconds=seconds,
                                             cpu=load_cpu)

                pinned_by_us = None if server in SELF_PINNED else server_cpu
                with server_running(args, url=url, body=body.read_bytes(), cpu=pinned_by_us,
                                    log=folder / "servers.log",
                                    ready_line=SELF_PINNED.get(server, "")):
                    sweeps[server, batching] = rate_sweep(measure=measure)
    return sweep_section(sweeps=sweeps, seconds=time.monotonic() - started,
                         step_seconds=seconds)


def sweep_section(*, sweeps: dict[tuple[str, str], list[Step]], seconds: float,
                  step_seconds: float) -> Section:
    def gain(server: str) -> float | None:
        off = best_throughput(sweeps[server, "off"])
        return best_throughput(sweeps[server, "on"]) / off if off else None

    rows = [(server, batching, number(s.rate, 0), number(s.result.throughput, 0),
             number(s.p50, 2), number(s.p99, 2), str(s.result.errors + s.result.dropped),
             "yes" if s.within_bound else "no")
            for (server, batching), steps in sweeps.items() for s in steps]
    best = [(server, number(best_throughput(sweeps[server, "off"]), 0),
             number(best_throughput(sweeps[server, "on"]), 0),
             "—" if (g := gain(server)) is None else f"{g:.2f}")
            for server in SERVERS]
    parameters = ", ".join(f"{k} {v}" for k, v in SWEEP_BATCHING.items())
    ray = gain("Ray Serve REST")
    return Section(
        title="8. Batching, open loop",
        description=(
            "The recurrent model of item 3 (one row per request). Each server alone on one "
            "core (batching off and on, each a fresh process, session ops inline); the open-"
            "loop load generator (bench/openloop.py, Python asyncio + aiohttp, at most "
            f"{MAX_IN_FLIGHT} requests in flight) on another. Offered rates from "
            f"{FIRST_RATE:.0f}/s, ×{RATE_STEP} a step, {step_seconds:g} s each, until the "
            "server falls behind twice running. A step is kept up with when every request "
            f"was sent and answered and p99 ≤ {P99_BOUND_MS:.0f} ms (latency from the "
            f"scheduled send). Batching: {parameters}."
        ),
        tables=[
            Table(title="Best throughput kept up with, requests/s",
                  columns=("server", "batching off", "batching on", "on ÷ off"), rows=best),
            Table(columns=("server", "batching", "offered /s", "answered /s", "p50 ms",
                           "p99 ms", "errors + dropped", "kept up"), rows=rows),
        ],
        targets=[Target("batching on ÷ off, best throughput within the p99 bound, open loop, "
                        "server on one core (recurrent, embedded REST)", gain("embedded REST"),
                        ">=", BATCHING_GAIN),
                 Target("the same, embedded REST against Ray Serve REST's in this run",
                        None if ray is None else gain("embedded REST"), ">=", ray or 0.0)],
        charts=[
            LineChart("batching_sweep_throughput.png", "Answered against offered, one core",
                      "offered requests/s", "answered requests/s",
                      {f"{server}, batching {batching}": tuple(
                          (s.rate, s.result.throughput) for s in steps)
                       for (server, batching), steps in sweeps.items()}, log_scale=True),
            LineChart("batching_sweep_p99.png", "p99 latency against offered load, one core",
                      "offered requests/s", "p99 ms (from the scheduled send)",
                      {f"{server}, batching {batching}": tuple(
                          (s.rate, s.p99) for s in steps if s.result.latencies_ms)
                       for (server, batching), steps in sweeps.items()}, log_scale=True),
        ],
        notes=["The floor peer is a bare aiohttp server calling the SavedModel through "
               "TensorFlow's own API with a simple batcher: what batching gains with the least "
               "around it.",
               "The Ray Serve peer (bench/ray_peer.py) makes the same calls in a Serve "
               "deployment, batched by `@serve.batch` with the same size, wait and concurrent "
               "batches; its whole local cluster (GCS, raylet, Serve's controller, HTTP proxy "
               "and the replica) shares the one core, as a server's parts do."],
        seconds=seconds,
    )
