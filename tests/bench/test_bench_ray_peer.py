"""The Ray Serve peer's replica splits a batch's answers back to its requests, on TF Serving's
test model.

In process, without a Ray cluster: Ray gives a starting cluster's raylet a fixed 30 s to
register, which a machine running the suite's workers misses (a cluster under 4 busy loops here
failed three starts running), and Serve's batcher refuses to run outside a replica.
`python -m bench --only inference,batching` runs the peer whole.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.ray_peer import Models
from tests.conftest import peer_data_or_skip

pytestmark = pytest.mark.slow


def _half_plus_two() -> Path:
    return (peer_data_or_skip() / "tf-serving-testdata" / "saved_model_half_plus_two_cpu"
            / "00000123")


def _plain(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v.tolist() for k, v in answer.items()}


def test_a_batch_of_two_models_runs_each_once_and_answers_in_order() -> None:
    models = Models(models={"a": str(_half_plus_two()), "b": str(_half_plus_two())},
                    max_batch_size=8, batch_wait_s=0.0, threads=1, intra_op=1, inter_op=1)
    calls = [("a", np.array([[1.0]], np.float32)), ("b", np.array([[2.0], [4.0]], np.float32)),
             ("a", np.array([[6.0], [8.0]], np.float32))]
    answers = asyncio.run(models.run_batch(calls))
    assert [_plain(a) for a in answers] == [
        {"y": [[2.5]]}, {"y": [[3.0], [4.0]]}, {"y": [[5.0], [6.0]]}]
