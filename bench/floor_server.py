"""The floor peer: what a developer writes in an afternoon to serve a SavedModel over HTTP.

A bare aiohttp server calling the SavedModel's `serving_default` with TensorFlow's own API,
answering TF Serving's REST predict in its row format; no authentication, routing, metrics or
version policy. With `--max_batch_size` above 1 it merges concurrent requests the simple way (the
first waits up to `--batch_timeout_micros` for others, `--num_batch_threads` run batches). The
platform's paths are measured against it: what they cost over the least one can serve with.

    python -m bench.floor_server --port=8600 --model=NAME=/path/to/version_dir [--model=...]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

Rows = np.ndarray
Outputs = dict[str, np.ndarray]


@dataclass
class Batcher:
    """Concurrent requests' rows run as one call: at most `max_rows`, the first waiting at most
    `timeout_s` for company."""

    run: Callable[[Rows], Outputs]
    pool: ThreadPoolExecutor
    max_rows: int
    timeout_s: float
    queue: asyncio.Queue[tuple[Rows, asyncio.Future[Outputs]]] = field(
        default_factory=asyncio.Queue)
    # The event loop keeps only weak references to tasks: these keep batches under way alive.
    running: set[asyncio.Task[None]] = field(default_factory=set)

    async def submit(self, rows: Rows) -> Outputs:
        future: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
        await self.queue.put((rows, future))
        return await future

    async def collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            taken = [await self.queue.get()]
            deadline = loop.time() + self.timeout_s
            while sum(len(r) for r, _ in taken) < self.max_rows:
                try:
                    taken.append(await asyncio.wait_for(self.queue.get(),
                                                        max(0.0, deadline - loop.time())))
                except TimeoutError:
                    break
            task = loop.create_task(self._answer(taken))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    async def _answer(self, taken: list[tuple[Rows, asyncio.Future[Outputs]]]) -> None:
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(
                self.pool, self.run, np.concatenate([rows for rows, _ in taken]))
        except Exception as error:  # every waiter hears of it, as TF Serving's batcher does
            for _, future in taken:
                future.set_exception(error)
            return
        start = 0
        for rows, future in taken:
            future.set_result({k: v[start:start + len(rows)] for k, v in outputs.items()})
            start += len(rows)


def row_format(outputs: Outputs) -> list[Any]:
    """TF Serving's row format: one value per row, or one object per row with several outputs."""
    if len(outputs) == 1:
        return next(iter(outputs.values())).tolist()
    names = sorted(outputs)
    return [{k: outputs[k][i].tolist() for k in names}
            for i in range(len(outputs[names[0]]))]


def runners_load(*, models: dict[str, str], intra_op: int,
                 inter_op: int) -> dict[str, Callable[[Rows], Outputs]]:
    """Each model's `serving_default` as a call on rows, through TensorFlow's own API (the Ray
    Serve peer's replica runs the same)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    runners: dict[str, Callable[[Rows], Outputs]] = {}
    for name, path in models.items():
        signature = tf.saved_model.load(path).signatures["serving_default"]
        [(feed, spec)] = signature.structured_input_signature[1].items()

        def run(rows: Rows, signature: Any = signature, feed: str = feed,
                dtype: Any = spec.dtype) -> Outputs:
            answer = signature(**{feed: tf.constant(rows, dtype=dtype)})
            return {k: v.numpy() for k, v in answer.items()}

        runners[name] = run
    return runners


def app_make(*, models: dict[str, str], max_batch_size: int, batch_timeout_micros: int,
             num_batch_threads: int, intra_op: int, inter_op: int) -> web.Application:
    runners = runners_load(models=models, intra_op=intra_op, inter_op=inter_op)
    pool = ThreadPoolExecutor(max_workers=num_batch_threads)
    batchers = {name: Batcher(run=run, pool=pool, max_rows=max_batch_size,
                              timeout_s=batch_timeout_micros / 1e6)
                for name, run in runners.items()} if max_batch_size > 1 else {}

    async def predict(request: web.Request) -> web.Response:
        name, _, verb = request.match_info["target"].partition(":")
        if name not in runners or verb != "predict":
            return web.json_response({"error": f"no model {name!r} or verb {verb!r}"},
                                     status=404)
        try:
            rows = np.asarray((await request.json())["instances"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as error:
            return web.json_response({"error": str(error)}, status=400)
        if name in batchers:
            outputs = await batchers[name].submit(rows)
        else:
            outputs = await asyncio.get_running_loop().run_in_executor(pool, runners[name], rows)
        return web.json_response({"predictions": row_format(outputs)})

    async def collectors(app: web.Application) -> Any:
        tasks = [asyncio.create_task(b.collect()) for b in batchers.values()]
        yield
        for task in tasks:
            task.cancel()
        pool.shutdown(wait=False)

    app = web.Application()
    app.router.add_post("/v1/models/{target}", predict)
    app.cleanup_ctx.append(collectors)
    return app


def peer_arguments(*, description: str) -> argparse.ArgumentParser:
    """The flags every peer server takes, named as the model server's own (the bench starts
    each peer with the embedded server's batching settings)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--max_batch_size", type=int, default=1)
    parser.add_argument("--batch_timeout_micros", type=int, default=0)
    # Unbatched, a request runs in one of these threads: as many as the clients at most;
    # batched, this many batches run at once.
    parser.add_argument("--num_batch_threads", type=int, default=8)
    parser.add_argument("--intra_op_parallelism", type=int, default=0)
    parser.add_argument("--inter_op_parallelism", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = peer_arguments(description=__doc__.splitlines()[0]).parse_args(argv)
    models = dict(m.split("=", 1) for m in args.model)
    web.run_app(app_make(models=models, max_batch_size=args.max_batch_size,
                         batch_timeout_micros=args.batch_timeout_micros,
                         num_batch_threads=args.num_batch_threads,
                         intra_op=args.intra_op_parallelism, inter_op=args.inter_op_parallelism),
                host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
