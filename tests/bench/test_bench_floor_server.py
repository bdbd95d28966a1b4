"""The floor peer answers TF Serving's REST predict on TF Serving's test model, batched or not."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from bench.floor_server import row_format
from bench.net import free_port
from tests.conftest import ROOT, peer_data_or_skip

pytestmark = pytest.mark.slow


def _floor(*flags: str) -> Iterator[str]:
    model = peer_data_or_skip() / "tf-serving-testdata" / "saved_model_half_plus_two_cpu"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_server", f"--port={port}",
         f"--model=half={Path(model, '00000123')}", *flags],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1/models/half:predict"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                requests.post(url, json={"instances": [0.0]}, timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.2)
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def unbatched() -> Iterator[str]:
    yield from _floor()


@pytest.fixture(scope="module")
def batched() -> Iterator[str]:
    # A long timeout: concurrent requests surely meet in one batch.
    yield from _floor("--max_batch_size=8", "--batch_timeout_micros=200000",
                      "--num_batch_threads=2")


def test_rows_are_predicted_in_tf_servings_row_format(unbatched: str) -> None:
    answer = requests.post(unbatched, json={"instances": [[1.0], [2.0], [5.0]]}, timeout=30)
    assert answer.json() == {"predictions": [[2.5], [3.0], [4.5]]}


def test_an_unknown_model_or_a_bad_body_is_a_client_error(unbatched: str) -> None:
    assert requests.post(unbatched.replace("/half:", "/other:"), json={"instances": [1.0]},
                         timeout=30).status_code == 404
    assert requests.post(unbatched.replace(":predict", ":classify"), json={"instances": [1.0]},
                         timeout=30).status_code == 404
    assert requests.post(unbatched, data=b"not json", timeout=30).status_code == 400
    assert requests.post(unbatched, json={"rows": [1.0]}, timeout=30).status_code == 400


def test_concurrent_requests_batched_together_each_get_their_own_rows(batched: str) -> None:
    sent = [[float(i)] * (1 + i % 3) for i in range(8)]  # 1 to 3 rows each, 16 in all
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(
            lambda rows: requests.post(batched, json={"instances": rows}, timeout=60).json(),
            sent))
    assert answers == [{"predictions": [x * 0.5 + 2 for x in rows]} for rows in sent]


def test_several_outputs_give_one_object_per_row() -> None:
    outputs = {"scores": np.array([[0.1, 0.9], [0.8, 0.2]]), "class_id": np.array([1, 0])}
    assert row_format(outputs) == [{"class_id": 1, "scores": [0.1, 0.9]},
                                   {"class_id": 0, "scores": [0.8, 0.2]}]
    assert row_format({"y": np.array([2.5, 3.0])}) == [2.5, 3.0]
