"""The Ray Serve peer answers TF Serving's REST predict on TF Serving's test model through a real
local Ray cluster, its batched path giving each request its own rows."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from bench.inference import ray_answering
from bench.net import free_port
from bench.ray_peer import Models
from tests.conftest import ROOT, peer_data_or_skip

pytestmark = pytest.mark.slow


def _half_plus_two() -> Path:
    return (peer_data_or_skip() / "tf-serving-testdata" / "saved_model_half_plus_two_cpu"
            / "00000123")


@pytest.fixture(scope="module")
def batched() -> Iterator[str]:
    port = free_port()
    # A long wait: concurrent requests surely meet in one batch.
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.ray_peer", f"--port={port}",
         f"--model=half={_half_plus_two()}", "--max_batch_size=8",
         "--batch_timeout_micros=200000", "--num_batch_threads=1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    try:
        while (process.poll() is None and time.monotonic() < deadline
               and not ray_answering(base)):
            time.sleep(0.5)
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        assert ray_answering(base), "the Ray Serve peer did not answer in 240 s"
        yield f"{base}/v1/models/half:predict"
    finally:
        process.terminate()  # the peer shuts its Ray cluster down on SIGTERM
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_concurrent_requests_batched_by_serve_each_get_their_own_rows(batched: str) -> None:
    sent = [[float(i)] * (1 + i % 3) for i in range(8)]  # 1 to 3 rows each, 16 in all
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(
            lambda rows: requests.post(batched, json={"instances": rows}, timeout=60).json(),
            sent))
    assert answers == [{"predictions": [x * 0.5 + 2 for x in rows]} for rows in sent]


def test_an_unknown_model_or_a_bad_body_is_a_client_error(batched: str) -> None:
    assert requests.post(batched.replace("/half:", "/other:"), json={"instances": [1.0]},
                         timeout=30).status_code == 404
    assert requests.post(batched.replace(":predict", ":classify"), json={"instances": [1.0]},
                         timeout=30).status_code == 404
    assert requests.post(batched, data=b"not json", timeout=30).status_code == 400
    assert requests.post(batched, json={"rows": [1.0]}, timeout=30).status_code == 400


def test_a_batch_of_two_models_runs_each_once_and_answers_in_order() -> None:
    models = Models(models={"a": str(_half_plus_two()), "b": str(_half_plus_two())},
                    max_batch_size=8, batch_wait_s=0.0, threads=1, intra_op=1, inter_op=1)
    calls = [("a", np.array([[1.0]], np.float32)), ("b", np.array([[2.0], [4.0]], np.float32)),
             ("a", np.array([[6.0], [8.0]], np.float32))]
    answers = asyncio.run(models.run_batch(calls))
    assert [{k: v.tolist() for k, v in a.items()} for a in answers] == [
        {"y": [[2.5]]}, {"y": [[3.0], [4.0]]}, {"y": [[5.0], [6.0]]}]
