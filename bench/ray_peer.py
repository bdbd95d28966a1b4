"""The Ray Serve peer: the same SavedModels served the way Ray Serve's documentation serves a model.

A local Ray cluster (GCS, raylet, Serve's controller and HTTP proxy, one replica actor) runs one
deployment that holds every model, routed at `/v1/models` and answering TF Serving's REST predict
in its row format, as the floor peer (bench/floor_server.py) does. The replica calls the
SavedModel's `serving_default` in a thread, off its event loop; with `--max_batch_size` above 1
the calls go through `@serve.batch`, Ray Serve's own batcher, with the same size, wait and
concurrent batches as the model server's batching parameters. A request crosses the proxy and
Ray's routing to the replica and back: what a general serving framework adds over the floor.

    python -m bench.ray_peer --port=8700 --model=NAME=/path/to/version_dir [--model=...]
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import tempfile
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from bench.cpu import descendants
from bench.floor_server import Outputs, Rows, peer_arguments, row_format, runners_load

# Room for every request in flight (the batching sweep's generator keeps up to 64 outstanding):
# Ray Serve's default (5 per replica) would queue the rest in the proxy and cap batches at 5.
MAX_ONGOING_REQUESTS = 256
ROUTE = "/v1/models"
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


class Models:
    """The replica: every model's runner and one thread pool for session runs; the deployment
    adds Serve's batcher as `batched`."""

    batched: Callable[[tuple[str, Rows]], Awaitable[Outputs]]

    def __init__(self, *, models: dict[str, str], max_batch_size: int, batch_wait_s: float,
                 threads: int, intra_op: int, inter_op: int) -> None:
        self.runners = runners_load(models=models, intra_op=intra_op, inter_op=inter_op)
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.batching = max_batch_size > 1

    def run(self, name: str, rows: Rows) -> Outputs:
        return self.runners[name](rows)

    async def run_batch(self, calls: list[tuple[str, Rows]]) -> list[Outputs]:
        """One session run per model among the batch's requests (the bench sends one model at
        a time, so one run)."""
        loop = asyncio.get_running_loop()
        answers: list[Outputs | None] = [None] * len(calls)
        for name in {name for name, _ in calls}:
            picked = [i for i, (n, _) in enumerate(calls) if n == name]
            outputs = await loop.run_in_executor(
                self.pool, self.run, name, np.concatenate([calls[i][1] for i in picked]))
            start = 0
            for i in picked:
                count = len(calls[i][1])
                answers[i] = {k: v[start:start + count] for k, v in outputs.items()}
                start += count
        return [a for a in answers if a is not None]

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        name, _, verb = request.url.path.removeprefix(ROUTE + "/").partition(":")
        if name not in self.runners or verb != "predict":
            return JSONResponse({"error": f"no model {name!r} or verb {verb!r}"},
                                status_code=404)
        try:
            rows = np.asarray((await request.json())["instances"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        if self.batching:
            outputs = await self.batched((name, rows))
        else:
            outputs = await asyncio.get_running_loop().run_in_executor(
                self.pool, self.run, name, rows)
        return JSONResponse({"predictions": row_format(outputs)})


def replica_class(*, max_batch_size: int, batch_wait_s: float, threads: int) -> type[Models]:
    """Models with its batched path decorated with Serve's own batcher."""
    from ray import serve

    # Ray's annotations describe decorated functions, not methods: untyped from here.
    batcher: Any = serve.batch(max_batch_size=max(1, max_batch_size),
                               batch_wait_timeout_s=batch_wait_s,
                               max_concurrent_batches=threads)

    class Replica(Models):
        @batcher
        async def batched(self, calls: list[tuple[str, Rows]]) -> list[Outputs]:
            # A method of its own: Serve tells a method from a function by its name on the
            # instance, and queues per instance.
            return await self.run_batch(calls)

    return Replica


def deployment_make(**options: Any) -> Any:
    """Models as a Serve deployment, batched by Serve's own batcher."""
    from ray import serve

    Replica = replica_class(max_batch_size=options["max_batch_size"],
                            batch_wait_s=options["batch_wait_s"], threads=options["threads"])
    deployment: Any = serve.deployment(
        Replica, name="models", num_replicas=1, max_ongoing_requests=MAX_ONGOING_REQUESTS,
        max_queued_requests=-1, ray_actor_options={"num_cpus": 0})
    return deployment.bind(**options)


STARTS = 3


def ray_init(*, cpus: int, scratch: str) -> None:
    """A local cluster. Ray gives its raylet a fixed 30 s to register and raises a bare Exception
    past it, which a loaded machine (the test suite's workers) can reach: tried again."""
    import ray

    for start in range(1, STARTS + 1):
        try:
            ray.init(num_cpus=cpus, include_dashboard=False, _temp_dir=scratch,
                     log_to_driver=False, configure_logging=False,
                     object_store_memory=256 * 1024 * 1024)
            return
        except Exception as error:
            if start == STARTS or "timed out during startup" not in str(error):
                raise
            ray.shutdown()


def tree_pin(*, pid: int, cpus: set[int]) -> None:
    """Every thread of `pid` and its descendants onto `cpus`; threads and processes they start
    later inherit it."""
    for process in (pid, *descendants(pid)):
        with contextlib.suppress(FileNotFoundError):
            for thread in os.listdir(f"/proc/{process}/task"):
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(thread), cpus)


def serve_until_stopped(*, port: int, host: str, pin: set[int] | None,
                        options: dict[str, Any]) -> None:
    import ray
    from ray import serve

    stopped = threading.Event()
    # Ray's agents outlive their raylet for minutes, busy: orphans come to this process, which
    # ends them once Ray has shut down.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # A short path of its own: Ray's Unix sockets live under it (107 bytes at most).
    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp") as scratch:
        ray_init(cpus=len(pin or os.sched_getaffinity(0)), scratch=scratch)
        # Ray's start puts a handler on SIGTERM that aborts the driver, leaving the cluster
        # behind: ours goes in after it, before the replica can answer anyone.
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, lambda *_: stopped.set())
        try:
            serve.start(http_options={"host": host, "port": port}, logging_config={
                "log_level": "WARNING", "enable_access_log": False})
            serve.run(deployment_make(**options), name="bench", route_prefix=ROUTE,
                      blocking=False)
            if pin:
                tree_pin(pid=os.getpid(), cpus=pin)
            print(f"ray serve answering on {host}:{port}", flush=True)
            while not stopped.wait(timeout=1.0):
                pass
        finally:
            serve.shutdown()
            ray.shutdown()
            for pid in descendants(os.getpid()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    # --num_batch_threads is Serve's max_concurrent_batches when batched.
    parser = peer_arguments(description=__doc__.splitlines()[0])
    # The whole peer (every Ray process and thread) on these cores once it answers, its cluster
    # sized to them. Not pinned from the start: Ray gives its raylet a fixed 30 s to register,
    # which a cluster starting on one core misses.
    parser.add_argument("--pin_cpus", default="", metavar="0,1")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    serve_until_stopped(port=args.port, host=args.host,
                        pin={int(c) for c in args.pin_cpus.split(",")} if args.pin_cpus else None,
                        options={"models": dict(m.split("=", 1) for m in args.model),
                                 "max_batch_size": args.max_batch_size,
                                 "batch_wait_s": args.batch_timeout_micros / 1e6,
                                 "threads": args.num_batch_threads,
                                 "intra_op": args.intra_op_parallelism,
                                 "inter_op": args.inter_op_parallelism})


if __name__ == "__main__":
    main()
