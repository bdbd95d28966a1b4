"""Item 3: inference latency and throughput of two small models along every path, batching on/off.

The models: the dense mlp of items 1-2, whose session run is cheap next to any protocol, and a
stacked GRU reading digits as 64-step pixel sequences, whose run is mostly per-call overhead (a
while loop of small ops) that a batch shares: the kind of model batching is for on a CPU.

Paths, slowest-layered last: direct (the SavedModel loaded in this process and run the way the
model server runs it: serving.servable.Servable through the same runner, no protocol), the floor
peer (bench/floor_server.py: a bare aiohttp server calling the SavedModel through TensorFlow's
own API, batching the simple way when on: the least one can serve REST predict with), the Ray
Serve peer (bench/ray_peer.py: the same calls in a Serve deployment behind Ray's HTTP proxy,
`@serve.batch` when on), the
embedded server's gRPC PredictionService, its REST API (both with the server's own token), the
same two with a user's platform token (checked in the server's front, serving/front.py), the same
two through the gateway (serving/gateway.py, compose's front for stock TF Serving: one more
process and loopback hop, the server's own token sent on), and the platform's REST API (gunicorn
→ Django → the model server, with a token). Batching on is the
stack's own model server (`manage.py serve_models`: --enable_batching with BATCHING_PARAMETERS
as the operator's TF_SERVING_BATCHING_PARAMETERS_FILE); batching off is a second embedded server
on the same model config without the flag, with its own gunicorn in front.

Closed-loop clients at concurrency 1 and 8, and 32 in the production shape (`--production`:
PostgreSQL, a Redis cache and throttles; processes of their own for the protocol paths, threads
of this process for the direct one), rounds interleaved; latency percentiles pool every
round's requests, throughput is the median over rounds, and batching's gain is the median of each
round's on ÷ off ratio (the two runs back to back). Clients and servers share the cores.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from bench import stats
from bench.api import PlatformClient
from bench.clients import PREDICT_METHOD, ClientPool, Request
from bench.cpu import group_seconds, own_seconds, tree_seconds
from bench.loadgen import Call, LoadResult, load_run
from bench.net import free_port
from bench.quiet import wait_quiet
from bench.report import BarChart, Section, Table, Target, number
from bench.stack import PYTHON, Stack, web_args

PATHS = ("direct", "floor REST", "Ray Serve REST", "embedded gRPC", "embedded REST", "front gRPC",
         "front REST", "gateway gRPC", "gateway REST", "platform REST")
# The user-facing paths and the model server's own ones they add to (a user's token checked,
# throttled and routed in the model server's front, or in the gateway before it, against the
# server's own token).
FRONT_OVER = (("front REST", "embedded REST"), ("front gRPC", "embedded gRPC"),
              ("gateway REST", "embedded REST"), ("gateway gRPC", "embedded gRPC"),
              ("platform REST", "embedded REST"),
              # Over the floor peer: the model server's own REST with a user's token, the
              # platform's REST API.
              ("front REST", "floor REST"), ("platform REST", "floor REST"),
              # What a general serving framework adds over the same floor.
              ("Ray Serve REST", "floor REST"))
# The performance round's goals (issue #43).
OVERHEAD_MS = 0.3
BATCHING_GAIN = 2.5
CONCURRENCY = (1, 8)
BATCHING = ("off", "on")
FLOOR_PROCESS = {"on": "floor", "off": "floor-unbatched"}
RAY_PROCESS = {"on": "ray-serve", "off": "ray-serve-unbatched"}


# Batches as large as the clients at concurrency 8, closed after at most 2 ms, one batch thread
# per core (TF Serving's default). With no timeout a free batch thread takes whatever is queued
# that moment, about half the clients; the price of the timeout is up to 2 ms at concurrency 1.
BATCHING_PARAMETERS = (
    "max_batch_size { value: 8 }\nbatch_timeout_micros { value: 2000 }\n"
    "num_batch_threads { value: 2 }\n"
)
# The model servers' session threads by batching (TF Serving's --tensorflow_intra_op_parallelism
# and --tensorflow_inter_op_parallelism, as the operator's TF_SERVING_*_OP_PARALLELISM).
# Off: each request's ops run in the thread serving it, one op at a time. With TensorFlow's
# default pools every run hands its ops to pool threads and back; for models this small those
# hand-offs, each a wake-up on another core, cost more than the ops (platform REST over
# embedded REST, dense, concurrency 1, medians of 8 rounds in two A/B runs: 2.38 and 1.61 ms
# with the default pools, 1.51 and 1.21 ms without).
# On: a batch's ops go to the inter-op pool (its default size, one thread per core). With every
# client in one batch only one batch runs at a time; run inline, its ops take one core and leave
# the other idle (recurrent model, embedded REST alone, concurrency 8, runs alternating: 1,030-
# 1,260 requests/s inline against 1,360-1,445 with the pool; a floor peer found the gap).
SESSION_PARALLELISM = {"off": (1, -1), "on": (1, 0)}


@dataclass(frozen=True)
class BenchModel:
    label: str
    name: str  # in the model registry
    zoo: str
    hyperparameters: dict[str, Any]
    description: str


DENSE = BenchModel(
    "dense", "bench-digits-mlp", "mlp", {"hidden_units": 1024},
    "the zoo mlp with 1,024 hidden units (1.1 M parameters, as in items 1-2)")
RECURRENT = BenchModel(
    "recurrent", "bench-digits-gru", "gru", {"hidden_units": 64, "recurrent_layers": 2},
    "the zoo gru, two layers of 64 units (38 k parameters) over the 64 pixels as a sequence")
MODELS = (DENSE, RECURRENT)


@dataclass(frozen=True)
class Endpoints:
    grpc_target: str
    rest_url: str
    platform_url: str
    gateway_grpc: str = ""
    gateway_rest: str = ""
    floor_rest: str = ""
    ray_rest: str = ""


def model_export(*, model: BenchModel, directory: Path) -> tuple[Path, Any]:
    """A small model trained briefly on digits, exported as the platform exports; + one row."""
    from training import catalog
    from training.data.array_pipelines import dataset_train, steps_per_epoch
    from training.scaling import batch_plan
    from training.spec import TrialSpec
    from training.trial.export import export_saved_model
    from training.trial.modelling import model_compile
    from training.trial.tfenv import keras
    from training.trial.zoo import ZOO_BUILDERS

    hparams = catalog.hyperparameters_resolve(model=model.zoo, values=model.hyperparameters)
    keras.utils.set_random_seed(hparams["seed"])
    data = catalog.dataset_load(spec=TrialSpec("bench", model.zoo, "digits", ""), hparams=hparams)
    batch = batch_plan(batch_size=32, replicas=1, learning_rate=0.001, scale=True,
                       warmup_epochs=0)
    steps = steps_per_epoch(examples=len(data.x_train), global_batch=32)
    built = ZOO_BUILDERS[model.zoo](hparams=hparams, data=data)
    model_compile(model=built, hparams=hparams, batch=batch, steps_per_epoch=steps,
                  exact_evaluation=False)
    built.fit(dataset_train(data=data, batch_size=32, seed=0, augment=False), epochs=2,
              steps_per_epoch=steps, verbose=0)
    exported = export_saved_model(model=built, data=data,
                                  export_dir=str(directory / model.label), classifier=True,
                                  from_logits=False)
    return Path(exported["path"]), data.x_test[:1]


@dataclass(frozen=True)
class DirectPath:
    make: Callable[[], Call]
    runs: Callable[[], int]  # session runs so far: requests ÷ runs = rows merged per run
    close: Callable[[], None]


def direct_caller(*, name: str, path: Path, row: Any, batching: bool) -> DirectPath:
    from serving.batching import BatchingRunner, DirectRunner, Runner
    from serving.config import parse_batching_parameters
    from serving.servable import Servable, session_config

    intra, inter = SESSION_PARALLELISM["on" if batching else "off"]
    servable = Servable(name=name, version=1, path=path, session_config=session_config(
        intra_op_parallelism=intra, inter_op_parallelism=inter))
    signature = servable.signatures["serving_default"]
    feed = signature.inputs["inputs"].name
    fetches = [signature.outputs[k].name for k in sorted(signature.outputs)]
    runner: Runner = (BatchingRunner(options=parse_batching_parameters(BATCHING_PARAMETERS))
                      if batching else DirectRunner())

    def make() -> Call:
        def call() -> None:
            runner.run(servable=servable, feeds={feed: row}, fetches=fetches, timeout_ms=0)
        return call

    def close() -> None:
        runner.close()
        servable.close()

    return DirectPath(make=make, runs=lambda: servable.runs, close=close)


def grpc_request(*, target: str, name: str, row: Any, headers: dict[str, str]) -> Request:
    from tensorflow_serving.apis import predict_pb2

    from serving.tensors import to_proto

    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = "serving_default"
    request.inputs["inputs"].CopyFrom(to_proto(row))
    return Request("grpc", target, PREDICT_METHOD, request.SerializeToString(),
                   headers=tuple(headers.items()))


def rest_request(*, url: str, row: Any, headers: dict[str, str]) -> Request:
    parts = urlsplit(url)
    body = json.dumps({"instances": row.tolist()}).encode()
    sent = {"Content-Type": "application/json", **headers}
    return Request("http", parts.netloc, parts.path, body, headers=tuple(sent.items()))


def _models_available(rest_url: str, headers: dict[str, str]) -> bool:
    try:
        for model in MODELS:
            answer = requests.get(f"{rest_url}/v1/models/{model.name}", timeout=5,
                                  headers=headers)
            states = [v["state"] for v in answer.json().get("model_version_status", [])]
            if "AVAILABLE" not in states:
                return False
        return True
    except (requests.RequestException, ValueError):
        return False


UNBATCHED_FRONT_MAX_AGE = 24 * 3600


def unbatched_start(stack: Stack) -> Endpoints:
    """A second model server without --enable_batching, on the same config, and a web for it."""
    grpc_port, rest_port, web_port = free_port(), free_port(), free_port()
    stack.spawn("serving-unbatched", [
        PYTHON, "-m", "serving", f"--port={grpc_port}", f"--rest_api_port={rest_port}",
        f"--model_config_file={stack.model_base_path / 'models.config'}",
        "--allow_version_labels_for_unavailable_models", "--host=127.0.0.1",
        f"--platform_access_max_age_seconds={UNBATCHED_FRONT_MAX_AGE}",
        "--tensorflow_intra_op_parallelism={}".format(SESSION_PARALLELISM["off"][0]),
        "--tensorflow_inter_op_parallelism={}".format(SESSION_PARALLELISM["off"][1]),
    ])
    endpoints = Endpoints(f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{rest_port}",
                          f"http://127.0.0.1:{web_port}")
    stack.spawn("web-unbatched", web_args(port=web_port), TF_SERVING_GRPC=endpoints.grpc_target,
                TF_SERVING_REST=endpoints.rest_url)
    stack.wait(lambda: _models_available(endpoints.rest_url, stack.serving_headers),
               what="unbatched model server",
               process="serving-unbatched")
    stack.wait(lambda: _ok(f"{endpoints.platform_url}/healthz"), what="unbatched web",
               process="web-unbatched")
    # Its front's table, once: no scheduler loop refreshes this server (its maximum age above).
    stack.manage("serving_access_push", TF_SERVING_REST=endpoints.rest_url)
    return endpoints


def gateway_start(stack: Stack, *, name: str, upstream: Endpoints) -> Endpoints:
    """The gateway (serving/gateway.py) in front of `upstream`, as compose runs it in front of
    stock TF Serving, sending the embedded server its own token; its table pushed once."""
    from serving.access import access_token_file_write

    grpc_port, rest_port = free_port(), free_port()
    token_file = stack.var_dir / f"{name}-upstream-token"
    access_token_file_write(path=str(token_file), token=stack.serving_token)
    stack.spawn(name, [
        PYTHON, "-m", "serving.gateway", f"--port={grpc_port}", f"--rest_api_port={rest_port}",
        "--rest_api_host=127.0.0.1", f"--upstream_grpc={upstream.grpc_target}",
        f"--upstream_rest={upstream.rest_url}", f"--upstream_access_token_file={token_file}",
        f"--platform_access_max_age_seconds={UNBATCHED_FRONT_MAX_AGE}",
    ])
    gateway = replace(upstream, gateway_grpc=f"127.0.0.1:{grpc_port}",
                      gateway_rest=f"http://127.0.0.1:{rest_port}")
    stack.wait(lambda: _answering(gateway.gateway_rest), what=name, process=name)
    stack.manage("serving_access_push", TF_SERVING_FRONT_REST=gateway.gateway_rest,
                 TF_SERVING_FRONT_GRPC=gateway.gateway_grpc)
    return gateway


def peer_start(stack: Stack, *, module: str, name: str, models: dict[str, Path],
               batching: bool, ready: Callable[[str], bool]) -> str:
    """A peer (bench/floor_server.py, bench/ray_peer.py) serving `models` with the model
    server's session threads, and its batching parameters when on; its base URL once `ready`."""
    from serving.config import parse_batching_parameters

    port = free_port()
    intra, inter = SESSION_PARALLELISM["on" if batching else "off"]
    flags = [f"--intra_op_parallelism={intra}", f"--inter_op_parallelism={inter}"]
    if batching:
        options = parse_batching_parameters(BATCHING_PARAMETERS)
        flags += [f"--max_batch_size={options.max_batch_size}",
                  f"--batch_timeout_micros={options.batch_timeout_micros}",
                  f"--num_batch_threads={options.num_batch_threads}"]
    stack.spawn(name, [PYTHON, "-m", module, f"--port={port}", *flags,
                       *(f"--model={model}={path}" for model, path in models.items())])
    url = f"http://127.0.0.1:{port}"
    stack.wait(lambda: ready(url), what=name, process=name)
    return url


def ray_answering(url: str) -> bool:
    """The replica itself answers (its 404 for no model), not only Ray's proxy."""
    try:
        return "no model" in requests.get(f"{url}/v1/models/-:predict", timeout=5).text
    except requests.RequestException:
        return False


def _answering(url: str) -> bool:
    try:
        requests.get(url, timeout=5)
    except requests.RequestException:
        return False
    return True


def _ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).ok
    except requests.RequestException:
        return False


Key = tuple[str, str, int]  # path, batching, concurrency
WARMUP = 5  # requests per client before the clock starts
BARE = ("gunicorn + Django, GET /healthz", "", 1)  # the web hop alone, for reference


@dataclass(frozen=True)
class Measured:
    results: dict[Key, list[LoadResult]]
    merged: list[float]  # requests per batched direct session run, per round
    cpu: CpuShares


def inference_measure(stack: Stack, client: PlatformClient, *, rounds: int,
                      requests_per_thread: int, concurrency: tuple[int, ...] = CONCURRENCY,
                      shape: str = "`make run`'s: SQLite and a local-memory cache") -> Section:
    started = time.monotonic()
    measured: dict[str, Measured] = {}
    # Registered by path, which staff may do from the import folder only (PLATFORM_VAR_DIR/import).
    imports = stack.var_dir / "import"
    imports.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-model-", dir=imports) as scratch:
        exported = {m.label: model_export(model=m, directory=Path(scratch)) for m in MODELS}
        for model in MODELS:
            client.model_register_path(model_name=model.name, path=str(exported[model.label][0]))
        endpoints = {
            "on": gateway_start(stack, name="gateway", upstream=Endpoints(
                stack.grpc_target, stack.rest_url, stack.base_url)),
            "off": gateway_start(stack, name="gateway-unbatched",
                                 upstream=unbatched_start(stack)),
        }
        served = {m.name: exported[m.label][0] for m in MODELS}
        endpoints = {batching: replace(
            where,
            floor_rest=peer_start(stack, module="bench.floor_server", name=FLOOR_PROCESS[batching],
                                  models=served, batching=batching == "on", ready=_answering),
            ray_rest=peer_start(stack, module="bench.ray_peer", name=RAY_PROCESS[batching],
                                models=served, batching=batching == "on", ready=ray_answering),
        ) for batching, where in endpoints.items()}
        stack.wait(lambda: _models_available(stack.rest_url, stack.serving_headers),
                   what="model server", process="serving")
        groups = {batching: _cpu_counters(stack, batching=batching) for batching in BATCHING}
        pool = ClientPool(size=max(concurrency))
        try:
            for model in MODELS:
                path, row = exported[model.label]
                measured[model.label] = _measure(
                    model=model, endpoints=endpoints, groups=groups, pool=pool, path=path,
                    row=row, headers=stack.headers, serving_headers=stack.serving_headers,
                    rounds=rounds, requests_per_thread=requests_per_thread,
                    concurrency=concurrency)
        finally:
            pool.close()
    for name in ("gateway", "gateway-unbatched", "web-unbatched", "serving-unbatched",
                 *FLOOR_PROCESS.values(), *RAY_PROCESS.values()):
        stack.stop_process(name)
    return _section(measured=measured, rounds=rounds, requests_per_thread=requests_per_thread,
                    seconds=time.monotonic() - started, concurrency=concurrency, shape=shape)


CpuShares = dict[Key, list[dict[str, float]]]  # CPU ms per request, by process, per round
CPU_SIDES = ("load generator", "web", "gateway", "model server", "floor server", "Ray Serve")
ON_PATH = {"direct": ("load generator",), "floor REST": ("load generator", "floor server"),
           "Ray Serve REST": ("load generator", "Ray Serve"),
           "embedded gRPC": ("load generator", "model server"),
           "embedded REST": ("load generator", "model server"),
           "front gRPC": ("load generator", "model server"),
           "front REST": ("load generator", "model server"),
           "gateway gRPC": ("load generator", "gateway", "model server"),
           "gateway REST": ("load generator", "gateway", "model server"),
           "platform REST": ("load generator", "web", "model server")}


CpuCounter = Callable[[], float]  # CPU seconds so far of one side


def _cpu_counters(stack: Stack, *, batching: str) -> dict[str, CpuCounter]:
    """Every process the stack spawns leads its own group; Ray's actors leave the peer's group
    but stay its descendants."""
    suffix = "" if batching == "on" else "-unbatched"
    groups = {"web": f"web{suffix}", "gateway": f"gateway{suffix}",
              "model server": f"serving{suffix}", "floor server": FLOOR_PROCESS[batching]}
    counters: dict[str, CpuCounter] = {
        side: partial(group_seconds, stack.processes[name].pid) for side, name in groups.items()}
    counters["Ray Serve"] = partial(tree_seconds, stack.processes[RAY_PROCESS[batching]].pid)
    return counters


def _cpu_snapshot(groups: dict[str, CpuCounter], pool: ClientPool) -> dict[str, float]:
    return {"load generator": own_seconds() + pool.cpu_seconds(),
            **{name: counter() for name, counter in groups.items()}}


Run = Callable[..., LoadResult]  # (concurrency=, requests=, warmup=) → one closed-loop run


def _runs(*, model: BenchModel, endpoints: dict[str, Endpoints], directs: dict[str, DirectPath],
          pool: ClientPool, row: Any, headers: dict[str, str],
          serving_headers: dict[str, str]) -> dict[tuple[str, str], Run]:
    def threads(make: Callable[[], Call]) -> Run:
        return lambda **load: load_run(make_call=make, **load)

    def processes(request: Request) -> Run:
        return lambda **load: pool.run(request=request, **load)

    runs: dict[tuple[str, str], Run] = {}
    # gRPC metadata keys are lower case; TF Serving clients send their token as a bearer token.
    user_grpc = {"authorization": headers["Authorization"].replace("Token ", "Bearer ", 1)}
    for batching, where in endpoints.items():
        runs["direct", batching] = threads(directs[batching].make)
        runs["Ray Serve REST", batching] = processes(rest_request(
            url=f"{where.ray_rest}/v1/models/{model.name}:predict", row=row, headers={}))
        runs["floor REST", batching] = processes(rest_request(
            url=f"{where.floor_rest}/v1/models/{model.name}:predict", row=row, headers={}))
        runs["embedded gRPC", batching] = processes(grpc_request(
            target=where.grpc_target, name=model.name, row=row, headers=serving_headers))
        runs["embedded REST", batching] = processes(rest_request(
            url=f"{where.rest_url}/v1/models/{model.name}:predict", row=row,
            headers=serving_headers))
        runs["front gRPC", batching] = processes(grpc_request(
            target=where.grpc_target, name=model.name, row=row, headers=user_grpc))
        runs["front REST", batching] = processes(rest_request(
            url=f"{where.rest_url}/v1/models/{model.name}:predict", row=row, headers=headers))
        runs["gateway gRPC", batching] = processes(grpc_request(
            target=where.gateway_grpc, name=model.name, row=row, headers=user_grpc))
        runs["gateway REST", batching] = processes(rest_request(
            url=f"{where.gateway_rest}/v1/models/{model.name}:predict", row=row,
            headers=headers))
        runs["platform REST", batching] = processes(rest_request(
            url=f"{where.platform_url}/api/v1/models/{model.name}:predict", row=row,
            headers=headers))
    healthz = urlsplit(f"{endpoints['on'].platform_url}/healthz")
    runs[BARE[:2]] = processes(Request("http", healthz.netloc, healthz.path, method="GET"))
    return runs


def _measure(*, model: BenchModel, endpoints: dict[str, Endpoints],
             groups: dict[str, dict[str, CpuCounter]], pool: ClientPool, path: Path, row: Any,
             headers: dict[str, str], serving_headers: dict[str, str], rounds: int,
             requests_per_thread: int, concurrency: tuple[int, ...]) -> Measured:
    """One model along every path: results per key, how many requests each batched direct
    session run merged, and the CPU each request cost at concurrency 8."""
    directs = {b: direct_caller(name=model.name, path=path, row=row, batching=b == "on")
               for b in BATCHING}
    runs = _runs(model=model, endpoints=endpoints, directs=directs, pool=pool, row=row,
                 headers=headers, serving_headers=serving_headers)
    results: dict[Key, list[LoadResult]] = {}
    merged: list[float] = []
    cpu: CpuShares = {}
    try:
        for _ in range(rounds):
            wait_quiet(idle=0.7, timeout=3, window=0.2)
            results.setdefault(BARE, []).append(runs[BARE[:2]](
                concurrency=1, requests=requests_per_thread, warmup=WARMUP))
            for clients in concurrency:
                for name in PATHS:
                    for batching in BATCHING:
                        wait_quiet(idle=0.7, timeout=3, window=0.2)
                        batched_runs = directs["on"].runs()
                        count = requests_per_thread * clients
                        calls = count + WARMUP * clients
                        before = _cpu_snapshot(groups[batching], pool)
                        results.setdefault((name, batching, clients), []).append(
                            runs[name, batching](concurrency=clients, requests=count,
                                                 warmup=WARMUP))
                        after = _cpu_snapshot(groups[batching], pool)
                        if clients == 8:
                            cpu.setdefault((name, batching, clients), []).append(
                                {k: (after[k] - before[k]) * 1000 / calls for k in after})
                        if (name, batching, clients) == ("direct", "on", 8):
                            merged.append(calls / max(1, directs["on"].runs() - batched_runs))
    finally:
        for direct in directs.values():
            direct.close()
    return Measured(results=results, merged=merged, cpu=cpu)


def _cpu_total(cpu: CpuShares, key: Key) -> float:
    """Median over rounds of the CPU ms per request of the processes on the request's path."""
    return stats.median([sum(r[side] for side in ON_PATH[key[0]]) for r in cpu[key]])


def _cpu_rows(cpu: CpuShares) -> list[tuple[str, ...]]:
    rows = []
    for name in PATHS:
        for batching in BATCHING:
            rounds = cpu[(name, batching, 8)]
            shares = {side: stats.median([r[side] for r in rounds]) for side in CPU_SIDES}
            on_path = ON_PATH[name]
            rows.append((name, batching, *(number(shares[s], 2) if s in on_path else "—"
                                           for s in CPU_SIDES),
                         number(_cpu_total(cpu, (name, batching, 8)), 2)))
    return rows


def _batching_bound_note(cpu: CpuShares, *, model: str) -> str:
    """What batching could give at most when the cores are the limit: it saves model time only."""
    saved = _cpu_total(cpu, ("direct", "off", 8)) - _cpu_total(cpu, ("direct", "on", 8))
    bounds = []
    for name in ("embedded gRPC", "embedded REST"):
        total = _cpu_total(cpu, (name, "off", 8))
        bounds.append(f"{name} {total:.2f} ms → at most {total / max(total - saved, 1e-9):.2f}×")
    return (
        f"{model.capitalize()} model: clients and servers share this machine's cores, so "
        "throughput at concurrency 8 is bounded by the CPU a request costs. In-process, batching "
        f"saved {saved:.2f} ms of CPU per request (direct off − on); a request costs "
        + ", ".join(bounds)
        + " if batching saved the same there."
    )


def batching_gain(results: dict[Key, list[LoadResult]], *, name: str) -> float:
    """Median over rounds of on ÷ off throughput at concurrency 8, each pair measured back to
    back: the machine's drift between rounds (±25 % here) cancels within a pair."""
    pairs = zip(results[(name, "on", 8)], results[(name, "off", 8)], strict=True)
    return stats.median([on.throughput / off.throughput for on, off in pairs])


def _section(*, measured: dict[str, Measured], rounds: int, requests_per_thread: int,
             seconds: float, concurrency: tuple[int, ...] = CONCURRENCY,
             shape: str = "`make run`'s: SQLite and a local-memory cache") -> Section:
    def pooled(label: str, key: Key) -> LoadResult:
        done = measured[label].results[key]
        return LoadResult([x for r in done for x in r.latencies_ms], sum(r.seconds for r in done))

    def throughput(label: str, key: Key) -> float:
        return stats.median([r.throughput for r in measured[label].results[key]])

    def gain(label: str, name: str) -> float:
        return batching_gain(measured[label].results, name=name)

    def added(label: str, batching: str, path: str = "front REST",
              base: str = "embedded REST") -> float:
        return (pooled(label, (path, batching, 1)).p50
                - pooled(label, (base, batching, 1)).p50)

    labels = [m.label for m in MODELS]
    rows = []
    for label in labels:
        for name in PATHS:
            for clients in concurrency:
                for batching in BATCHING:
                    key = (name, batching, clients)
                    all_of = pooled(label, key)
                    rows.append((label, name, batching, str(clients), number(all_of.p50, 2),
                                 number(all_of.p99, 2), number(throughput(label, key), 0)))
    gains_rows = [(label, name, number(gain(label, name), 2)) for label in labels
                  for name in PATHS]
    added_rows = [(label, f"{path} − {base}", f"{added(label, 'on', path, base):.2f}",
                   f"{added(label, 'off', path, base):.2f}")
                  for label in labels for path, base in FRONT_OVER]
    cpu_rows = [(label, *row) for label in labels for row in _cpu_rows(measured[label].cpu)]
    categories = tuple(name.replace(" ", "\n", 1) for name in PATHS)
    models_text = "; ".join(f"{m.label}: {m.description}" for m in MODELS)
    parameters = BATCHING_PARAMETERS.strip().replace("\n", ", ")
    return Section(
        title="3. Inference",
        description=(
            f"Models ({models_text}), each trained briefly on digits and exported as the "
            "platform exports (`serving_default`: 64 float32 features → probabilities, "
            "class_id); one row per request. "
            f"The stack's shape: {shape}. "
            f"{rounds} interleaved round(s) of {requests_per_thread} requests per client thread "
            "for every model × path × batching × concurrency; p50/p99 pool every round's "
            "requests, throughput is the median over rounds and batching's gain the median of "
            "each round's on ÷ off ratio (measured back to back). Batching on = `serve_models` "
            "with `TF_SERVING_BATCHING_PARAMETERS_FILE` holding `" + parameters + "` (the direct "
            "path batches with the same parameters); off = the same server without "
            "--enable_batching. Session threads (TF Serving's `--tensorflow_*_op_parallelism`, "
            "the operator's `TF_SERVING_INTRA_OP_PARALLELISM` and "
            "`TF_SERVING_INTER_OP_PARALLELISM`; the direct path and the floor peer alike): "
            "batching off {}/{}, a request's ops run in the thread serving it, the tuning for "
            "small models on few cores; batching on {}/{}, a batch's ops go to TensorFlow's "
            "inter-op pool, which a batch is large enough to pay for.".format(
                *SESSION_PARALLELISM["off"], *SESSION_PARALLELISM["on"])
        ),
        tables=[
            Table(columns=("model", "path", "batching", "concurrency", "p50 ms", "p99 ms",
                           "throughput req/s"), rows=rows),
            Table(title="Batching on ÷ off, throughput at concurrency 8 (median of the "
                        "rounds' back-to-back ratios)",
                  columns=("model", "path", "on ÷ off"), rows=gains_rows),
            Table(title="What the platform adds: p50 over the model server's own path at "
                        "concurrency 1, ms",
                  columns=("model", "paths", "batching on", "batching off"), rows=added_rows),
            Table(
                title="CPU per request at concurrency 8, ms (median over rounds; processes on "
                      "the request's path; load generator = the benchmark process and its "
                      "client processes)",
                columns=("model", "path", "batching", *CPU_SIDES, "total"),
                rows=cpu_rows,
            ),
        ],
        targets=[
            # Batching off: no batch timeout in either path to add its jitter to the difference.
            Target("front REST p50 − embedded REST p50, concurrency 1 (dense, batching off)",
                   added(DENSE.label, "off"), "<=", OVERHEAD_MS, " ms"),
            # Each over the floor: what the platform's front and Ray Serve add to the least one
            # can serve with, in the same run.
            Target("front REST − floor REST p50, concurrency 1 (dense, batching off), against "
                   "Ray Serve REST − floor REST in this run",
                   added(DENSE.label, "off", "front REST", "floor REST"), "<=",
                   added(DENSE.label, "off", "Ray Serve REST", "floor REST"), " ms"),
            Target("batching on ÷ off throughput at concurrency 8, embedded gRPC (recurrent)",
                   gain(RECURRENT.label, "embedded gRPC"), ">=", BATCHING_GAIN),
            Target("batching on ÷ off throughput at concurrency 8, embedded REST (recurrent)",
                   gain(RECURRENT.label, "embedded REST"), ">=", BATCHING_GAIN),
            Target("batching on ÷ off throughput at concurrency 8, embedded REST against Ray "
                   "Serve REST's in this run (recurrent)", gain(RECURRENT.label, "embedded REST"),
                   ">=", gain(RECURRENT.label, "Ray Serve REST")),
        ],
        charts=[
            BarChart("inference_latency_p50.png", "Inference latency p50, batching on", "ms",
                     categories,
                     {f"{label}, concurrency {c}": tuple(pooled(label, (n, "on", c)).p50
                                                         for n in PATHS)
                      for label in labels for c in concurrency}, log_scale=True),
            BarChart("inference_throughput_c8.png", "Throughput at concurrency 8", "requests/sec",
                     categories,
                     {f"{label}, batching {b}": tuple(throughput(label, (n, b, 8))
                                                      for n in PATHS)
                      for label in labels for b in BATCHING}, log_scale=True),
        ],
        notes=[
            *(_batching_bound_note(measured[label].cpu, model=label) for label in labels),
            "Batching pays where the model's own per-call cost dominates what a request costs: "
            "the dense model's session run is a fraction of the protocol handling around it, so "
            "sharing it across a batch saves little; the recurrent model's run is mostly a "
            "while loop's per-step overhead, the same for 1 row or 8.",
            "Batching on merged a median "
            + ", ".join(f"{stats.median(measured[label].merged):.1f} ({label})"
                        for label in labels)
            + " requests per session run (direct path, concurrency 8).",
            f"For reference, the web hop alone (GET /healthz through gunicorn and Django: no "
            f"authentication, one SELECT 1) has p50 {pooled(DENSE.label, BARE).p50:.2f} ms; "
            f"embedded REST predict (dense, batching off) has "
            f"{pooled(DENSE.label, ('embedded REST', 'off', 1)).p50:.2f} ms.",
            "Load generator: the direct path's clients are threads of the benchmark process "
            f"(Python {sys.version.split()[0]}); every other path's clients are processes of "
            "their own, one connection each (`http.client` kept alive for REST, a gRPC "
            "channel), sending prepared bytes and not parsing the answers.",
        ],
        seconds=seconds,
    )
