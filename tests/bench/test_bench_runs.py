"""Reading a training run's epochs back from the metrics API's answer."""

import pytest

from bench.runs import EpochRecord, TrainingRun, epochs_from_metrics


def metric(name: str, value: float, *, epoch: int, step: int, at: str, trial: int = 0) -> dict:
    return {"trial": trial, "name": name, "step": step, "epoch": epoch, "value": value,
            "recorded_at": at}


def epoch_metrics(epoch: int, *, at: str, rate: float, trial: int = 0) -> list[dict]:
    return [
        metric("images_per_sec", rate, epoch=epoch, step=epoch, at=at, trial=trial),
        metric("epoch_seconds", 1344 / rate, epoch=epoch, step=epoch, at=at, trial=trial),
        metric("val_accuracy", 0.9 + epoch / 100, epoch=epoch, step=epoch, at=at, trial=trial),
    ]


def test_epochs_come_from_the_latest_trial_without_throughput_samples() -> None:
    metrics = [
        *epoch_metrics(1, at="2026-01-01T00:00:01Z", rate=100.0, trial=0),  # a failed attempt
        *epoch_metrics(1, at="2026-01-01T00:01:00.500000Z", rate=400.0, trial=1),
        # The throughput sampler's series shares the name, not the time.
        metric("images_per_sec", 9999.0, epoch=2, step=1, at="2026-01-01T00:01:00.700000Z",
               trial=1),
        *epoch_metrics(2, at="2026-01-01T00:01:01.500000Z", rate=1344.0, trial=1),
    ]
    records = epochs_from_metrics(metrics)
    assert [r.epoch for r in records] == [1, 2]
    assert [r.images_per_sec for r in records] == [400.0, 1344.0]
    assert records[1].seconds == pytest.approx(1.0)
    assert records[1].val_accuracy == pytest.approx(0.92)
    assert records[1].ended_at - records[0].ended_at == pytest.approx(1.0)
    assert epochs_from_metrics([]) == []


def record(epoch: int, *, rate: float, seconds: float, ended_at: float) -> EpochRecord:
    return EpochRecord(epoch=epoch, images_per_sec=rate, seconds=seconds, ended_at=ended_at,
                       val_accuracy=0.95)


def test_steady_and_wall_clock_rates_leave_the_first_epoch_out() -> None:
    run = TrainingRun(label="x", started_at=100.0, first_step_at=104.0, epochs=[
        record(1, rate=100.0, seconds=10.0, ended_at=110.0),
        record(2, rate=1000.0, seconds=1.0, ended_at=111.25),  # 0.25 s between epochs
        record(3, rate=1000.0, seconds=1.0, ended_at=112.5),
        record(4, rate=500.0, seconds=2.0, ended_at=114.75),
    ])
    assert run.steady_images_per_sec == 1000.0
    assert run.wall_images_per_sec == pytest.approx(1000.0 / 1.25)
    assert run.first_step_seconds == 4.0
    assert run.final_val_accuracy == 0.95
    assert TrainingRun(label="one", epochs=run.epochs[:1]).wall_images_per_sec is None
    assert TrainingRun(label="none", epochs=[]).first_step_seconds is None


def test_overlap_keeps_steady_epochs_wholly_inside_the_other_runs_span() -> None:
    run = TrainingRun(label="a", epochs=[
        record(1, rate=50.0, seconds=1.0, ended_at=11.0),  # tracing: never counted
        record(2, rate=100.0, seconds=1.0, ended_at=12.0),
        record(3, rate=200.0, seconds=1.0, ended_at=13.0),
        record(4, rate=300.0, seconds=1.0, ended_at=14.0),
    ])
    assert run.span == (10.0, 14.0)
    assert run.steady_images_per_sec_within((11.5, 20.0)) == 250.0  # epoch 2 began at 11.0
    assert run.steady_images_per_sec_within((0.0, 13.0)) == 150.0
    assert run.steady_images_per_sec_within((20.0, 30.0)) is None
