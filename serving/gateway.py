"""`python -m serving.gateway`: users' platform tokens in front of stock TF Serving.

The embedded model server checks platform tokens in its own front (front.py). A deployment on
the `tensorflow/serving` image (docker-compose.yml) cannot, so this process stands in front of it
instead, with the same front: the platform pushes it the same access table, and it answers
TF Serving's REST and gRPC model calls for users as the embedded server does (the same
visibility, throttle, labels and canary routing, the same errors), forwarding what passes to TF
Serving on the internal network. It holds no database credentials and needs no TensorFlow.

    python -m serving.gateway --port 8500 --rest_api_port 8501 \\
        --upstream_grpc tfserving:8500 --upstream_rest http://tfserving:8501

Its own token (TF_SERVING_ACCESS_TOKEN or _FILE, as the embedded server's) is required: it is
what the platform pushes the access table with. In front of an embedded server (which demands its
own token of every call, as TF Serving does not), `--upstream_access_token_file` names a file
holding that server's token, sent with every forwarded call in place of the caller's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from aiohttp import web

from serving.access import access_token_from_env
from serving.front import Front
from serving.gateway_grpc import gateway_grpc_server
from serving.gateway_rest import GatewayRest

log = logging.getLogger(__name__)
NO_TOKEN = ("the gateway needs its own token (TF_SERVING_ACCESS_TOKEN or "  # noqa: S105
            "TF_SERVING_ACCESS_TOKEN_FILE): the platform pushes the access table with it")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m serving.gateway")
    parser.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free one)")
    parser.add_argument("--rest_api_port", type=int, default=8501)
    parser.add_argument("--rest_api_host", default="0.0.0.0")  # noqa: S104 - a server
    parser.add_argument("--upstream_grpc", required=True, help="TF Serving's gRPC host:port")
    parser.add_argument("--upstream_rest", required=True, help="TF Serving's REST URL")
    parser.add_argument("--platform_access_max_age_seconds", type=float, default=60.0,
                        help="platform tokens get UNAVAILABLE when the last push is older")
    parser.add_argument("--upstream_access_token_file", default="",
                        help="a file with the upstream's own token (an embedded server's)")
    parser.add_argument("--grpc_threads", type=int, default=32)
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = access_token_from_env()
    if not token:
        log.error(NO_TOKEN)
        return 2
    if args.platform_access_max_age_seconds <= 0:
        log.error("--platform_access_max_age_seconds must be positive")
        return 2
    upstream_token = ""
    if args.upstream_access_token_file:
        with open(args.upstream_access_token_file, encoding="utf-8") as handle:
            upstream_token = handle.read().strip()
    front = Front(max_age_seconds=args.platform_access_max_age_seconds)
    server, channel, grpc_port = gateway_grpc_server(
        front=front, token=token, upstream=args.upstream_grpc, port=args.port,
        upstream_token=upstream_token, threads=args.grpc_threads)
    server.start()
    rest = GatewayRest(front=front, token=token, upstream=args.upstream_rest,
                       upstream_token=upstream_token)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(rest.app(), access_log=None, keepalive_timeout=120,
                           shutdown_timeout=2.0)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, args.rest_api_host, args.rest_api_port, backlog=1024)
    loop.run_until_complete(site.start())
    rest_port = runner.addresses[0][1]
    # Tests and operators read the ports it bound (0 asks for free ones).
    log.info("Gateway: gRPC on %d, REST on %d, in front of %s and %s", grpc_port, rest_port,
             args.upstream_grpc, args.upstream_rest)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, loop.stop)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(runner.cleanup())
        loop.close()
        server.stop(grace=2).wait()
        channel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
