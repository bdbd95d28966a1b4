"""TensorBoard event files of a trial (training/board_layout.py): the chief's scalars, graph,
histograms and a profiler trace land in `<work_dir>/tensorboard`, a resumed trial appends to them,
and what cannot work (a trace beside parameter servers, a malformed or long range) is refused up
front."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.catalog import hyperparameters_resolve, spec_validate
from training.errors import InvalidInput
from training.spec import Resources, TrialSpec


def board_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """tag → step → value, read from every event file of one TensorBoard run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    accumulator.Reload()
    scalars: dict[str, dict[int, float]] = defaultdict(dict)
    for tag in accumulator.Tags()["tensors"]:
        for event in accumulator.Tensors(tag):
            value = make_ndarray(event.tensor_proto)
            if value.shape == () and value.dtype.kind == "f":  # a scalar, not a histogram
                scalars[tag][event.step] = float(value)
    return dict(scalars)


def board_tags(folder: Path) -> dict[str, Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return accumulator.Tags()  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_chief_writes_scalars_graph_histograms_and_a_trace_and_a_resume_appends(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    work = tmp_path / "trial"
    asked = {"tensorboard_histograms": True, "profile_steps": "2,3", "epochs": 1}
    first = run_trial(spec=make_spec(work_dir=work, model=digits_module, hyperparameters=asked))
    assert first.outcome.status == "completed", first.outcome.exit_reason
    board = work / "tensorboard"
    train = board_scalars(board / "train")
    assert set(train["epoch_loss"]) == {0} and set(train["epoch_accuracy"]) == {0}
    assert set(board_scalars(board / "validation")["epoch_loss"]) == {0}
    tags = board_tags(board / "train")
    assert tags["graph"] and "keras" in tags["tensors"]  # the train step's graph, the model
    assert any(tag.endswith("_0/histogram") for tag in tags["tensors"]), tags["tensors"]
    assert list(board.glob("plugins/profile/*/*.xplane.pb")), sorted(board.rglob("*"))

    # Restarted from its checkpoint with more epochs: the same folder, the next steps.
    second = run_trial(spec=make_spec(work_dir=work, model=digits_module,
                                      hyperparameters={"epochs": 3}))
    assert second.outcome.status == "completed", second.outcome.exit_reason
    assert second.phase("resumed")[0]["from_epoch"] == 1
    train = board_scalars(board / "train")
    assert set(train["epoch_loss"]) == {0, 1, 2}
    assert train["epoch_loss"][2] < train["epoch_loss"][0]
    assert len(list((board / "train").glob("events.out.tfevents.*"))) >= 2
    assert not (work / "tmp" / "tensorboard").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [("x", "a step"), ("0,3", "from 1"), ("5,3", "start first"), ("1,50", "at most 20 steps"),
     ("1,2,3", "a step"), ([1, 2], "a step")],
)
def test_a_malformed_or_long_profile_range_is_refused(value: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        hyperparameters_resolve(model="mlp", values={"profile_steps": value})


def test_a_trace_beside_parameter_servers_is_refused_with_the_reason(tmp_path: Path) -> None:
    def _spec(**fields: Any) -> TrialSpec:
        return TrialSpec(trial_id="t", model="mlp", dataset="digits", work_dir=str(tmp_path),
                         **fields)

    resources = Resources(workers=2, parameter_servers=1)
    spec_validate(spec=_spec(resources=resources, hyperparameters={"tensorboard_histograms": True}))
    with pytest.raises(InvalidInput, match="profile_steps cannot be used with parameter servers"):
        spec_validate(spec=_spec(resources=resources, hyperparameters={"profile_steps": "3,4"}))
    spec_validate(spec=_spec(resources=Resources(workers=2),
                             hyperparameters={"profile_steps": "3"}))
