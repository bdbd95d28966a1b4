"""An open-loop load generator: requests leave on a fixed schedule, whether or not earlier ones
were answered, so a slow server meets the load it would meet from many users instead of slowing
its clients down. Latency counts from each request's scheduled time (no coordinated omission).

    python -m bench.openloop --url=URL --body=FILE --rate=400 --seconds=3 [--max_in_flight=64]

Prints one JSON object: sent, answered, errors, dropped (not sent: the in-flight cap was
reached), seconds (first send to last answer), latencies_ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp


@dataclass
class OpenLoopResult:
    sent: int = 0
    answered: int = 0
    errors: int = 0
    dropped: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.answered / self.seconds if self.seconds else 0.0


async def open_loop_run(*, url: str, body: bytes, rate: float, seconds: float,
                        max_in_flight: int) -> OpenLoopResult:
    result = OpenLoopResult()
    loop = asyncio.get_running_loop()
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=max_in_flight)
    async with aiohttp.ClientSession(connector=connector) as session:
        in_flight: set[asyncio.Task[None]] = set()

        async def one(scheduled: float) -> None:
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    ok = answer.status == 200
            except (aiohttp.ClientError, OSError):
                ok = False
            if ok:
                result.answered += 1
                result.latencies_ms.append((loop.time() - scheduled) * 1000)
            else:
                result.errors += 1

        start = loop.time()
        for index in range(int(rate * seconds)):
            scheduled = start + index / rate
            if (delay := scheduled - loop.time()) > 0:
                await asyncio.sleep(delay)
            if len(in_flight) >= max_in_flight:
                result.dropped += 1
                continue
            result.sent += 1
            task = asyncio.create_task(one(scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        while in_flight:
            await asyncio.gather(*list(in_flight))
        result.seconds = loop.time() - start
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True, help="a file holding the request's body")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--max_in_flight", type=int, default=64)
    args = parser.parse_args(argv)
    result = asyncio.run(open_loop_run(url=args.url, body=Path(args.body).read_bytes(),
                                       rate=args.rate, seconds=args.seconds,
                                       max_in_flight=args.max_in_flight))
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
