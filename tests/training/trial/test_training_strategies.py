"""One unchanged user module trains on digits under every strategy the allocation can imply.

Each case starts real trial processes through the supervisor (TF_CONFIG, ports on 127.0.0.1,
logical CPU devices standing in for GPU slots) and checks accuracy, the recorded strategy and
batch/LR scaling, and that synchronous replicas and workers end with bit-identical weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.spec import Resources

pytestmark = pytest.mark.slow

CASES = {
    "default": (Resources(), "default", 1),
    "one_device": (Resources(gpus_per_worker=1), "OneDeviceStrategy", 1),
    # A worker's half of one GPU: as one GPU, its memory bounded where the GPU is real.
    "gpu_share": (Resources(gpus_per_worker=1, gpu_share_milli=500, gpu_memory_limit_mb=4096),
                  "OneDeviceStrategy", 1),
    "mirrored": (Resources(gpus_per_worker=2), "MirroredStrategy", 2),
    "multi_worker": (Resources(workers=2), "MultiWorkerMirroredStrategy", 2),
    "parameter_server": (Resources(workers=2, parameter_servers=1), "ParameterServerStrategy", 1),
}
SYNCHRONOUS = ("default", "one_device", "gpu_share", "mirrored", "multi_worker")


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> Callable[[str], Any]:
    runs: dict[str, Any] = {}

    def get(case: str) -> Any:
        if case not in runs:
            resources = CASES[case][0]
            spec = make_spec(
                work_dir=tmp_path_factory.mktemp(case),
                model=digits_module,
                resources=resources,
                target_value=0.85,
            )
            runs[case] = run_trial(spec=spec)
        return runs[case]

    return get


def test_a_share_of_an_emulated_gpu_trains_and_says_its_memory_is_not_bounded(
    trained: Callable[[str], Any],
) -> None:
    outcome = trained("gpu_share").outcome
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.strategy_reason.endswith(
        "; 0.5 of one GPU (its memory is not bounded: no physical GPU)"), outcome.strategy_reason


@pytest.mark.parametrize("case", list(CASES))
def test_same_module_trains_under_every_strategy(case: str, trained: Callable[[str], Any]) -> None:
    run = trained(case)
    outcome = run.outcome
    assert outcome.status == "completed", outcome.exit_reason
    _, strategy, replicas = CASES[case]
    assert outcome.strategy == strategy and outcome.replicas == replicas
    # The whole curve and what the tasks said, should a run end below the mark again: one
    # parameter-server run in CI ended at 0.57 once; 20 runs on a loaded machine here did not.
    curve = [(m["epoch"], m.get("accuracy"), m.get("val_accuracy"))
             for m in run.payloads("metric")]
    said = [(e.task, e.kind, e.payload) for e in run.events if e.kind in ("log", "error")]
    assert outcome.final_metrics["val_accuracy"] >= 0.9, (curve, said[-20:])
    assert outcome.epochs_completed == 4
    # Per-replica batch 32 and rate 0.01 scale with the replicas in sync.
    assert outcome.per_replica_batch_size == 32
    assert outcome.global_batch_size == 32 * replicas
    assert outcome.learning_rate == pytest.approx(0.01 * replicas)
    assert outcome.time_to_target_seconds is not None and outcome.time_to_target_seconds > 0
    epochs = [m["epoch"] for m in run.payloads("metric")]
    assert epochs == [1, 2, 3, 4]
    for metric in run.payloads("metric"):
        assert {"loss", "accuracy", "val_loss", "val_accuracy", "epoch_seconds"} <= set(metric)
    throughput = run.payloads("throughput")
    assert throughput and all(t["images_per_sec"] > 0 for t in throughput)
    assert Path(outcome.export_path, "saved_model.pb").is_file()
    assert Path(outcome.best_checkpoint_path + ".index").is_file()
    from training.trial.tfenv import tf

    # The best epoch's checkpoint is that epoch's whole checkpoint (hard links, not a second
    # write), optimizer slots included; the model's weights read from it under model/.
    saved = [name for name, _ in tf.train.list_variables(outcome.best_checkpoint_path)]
    assert any(name.startswith("model/") for name in saved)
    assert any(name.startswith("optimizer/") for name in saved), saved
    assert all(code == 0 for code in outcome.exit_codes.values()), outcome.exit_codes


@pytest.mark.parametrize("case", list(CASES))
def test_the_chief_alone_leaves_tensorboard_scalars_under_every_strategy(
    case: str, trained: Callable[[str], Any]
) -> None:
    from tests.training.trial.test_training_board import board_scalars

    work = Path(trained(case).outcome.export_path).parent
    assert set(board_scalars(work / "tensorboard" / "train")["epoch_loss"]) == {0, 1, 2, 3}
    assert set(board_scalars(work / "tensorboard" / "validation")["epoch_loss"]) == {0, 1, 2, 3}
    # Other workers wrote into scratch folders, removed when training ended.
    assert sorted(p.name for p in (work / "tensorboard").iterdir()) == ["train", "validation"]
    assert not list(work.glob("tmp/**/events.out.tfevents.*"))


@pytest.mark.parametrize("case", SYNCHRONOUS)
def test_synchronous_strategies_end_with_identical_weights(
    case: str, trained: Callable[[str], Any]
) -> None:
    checksums = trained(case).outcome.weights_checksums
    replicas = CASES[case][2]
    assert len([k for k in checksums if "/replica:" in k]) == replicas
    assert len(set(checksums.values())) == 1, checksums


def test_device_report_shows_emulated_gpus_and_variable_placement(
    trained: Callable[[str], Any],
) -> None:
    outcome = trained("mirrored").outcome
    assert "emulated as 2 logical CPU devices" in outcome.strategy_reason
    cpu = next(d for d in outcome.devices if d["device_type"] == "CPU")
    assert cpu["logical_devices"] == 2 and cpu["memory_mb"] > 0
    assert "split into 2 logical devices" in cpu["log_line"]
    placement = outcome.placement["worker:0"]
    assert placement["replica_devices"] == [
        "/job:localhost/replica:0/task:0/device:CPU:0",
        "/job:localhost/replica:0/task:0/device:CPU:1",
    ]
    # Every variable is mirrored: 4 variables, one copy on each replica device.
    assert set(placement["variables_per_device"].values()) == {placement["variables"]}


def test_gpus_held_on_a_real_gpu_node_that_tensorflow_cannot_see_fail_the_trial_not_emulated(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    """Slots NVML found (not emulated) are GPUs the task must see; here TensorFlow sees none,
    as on a node whose TensorFlow has no CUDA. The trial says so, and trains on nothing else."""
    spec = make_spec(work_dir=tmp_path, model=digits_module,
                     resources=Resources(gpus_per_worker=2, gpu_ids=(0, 1), gpus_physical=True))
    run = run_trial(spec=spec)
    assert run.outcome.status == "failed" and not run.outcome.retryable
    assert "holds 2 GPUs of its node, but its TensorFlow sees 0" in run.outcome.exit_reason
    [error] = run.payloads("error")
    assert error["category"] == "node" and error["error_type"] == "NodeUnfit"
    assert not run.phase("strategy") and not run.payloads("metric")


def test_multi_worker_runs_two_processes_with_tf_config(trained: Callable[[str], Any]) -> None:
    run = trained("multi_worker")
    assert set(run.outcome.exit_codes) == {"worker:0", "worker:1"}
    assert len(set(run.host_pids().values())) == 2
    # Only the chief reports epoch metrics and exports; both report throughput and weights.
    assert {e.task for e in run.events if e.kind == "metric"} == {"worker:0"}
    assert {e.task for e in run.events if e.kind == "weights"} == {"worker:0", "worker:1"}


def test_parameter_servers_hold_the_variables(trained: Callable[[str], Any]) -> None:
    outcome = trained("parameter_server").outcome
    assert set(outcome.exit_codes) == {"chief:0", "worker:0", "worker:1", "ps:0"}
    placement = outcome.placement["chief:0"]
    assert all("/job:ps/" in device for device in placement["variables_per_device"])


def test_export_takes_raw_inputs_and_matches_keras(
    trained: Callable[[str], Any], digits_module: str
) -> None:
    # TF is imported only by the tests that need it.
    from training.arrays import digits_load
    from training.trial.modelling import user_module_load
    from training.trial.tfenv import keras, tf

    outcome = trained("default").outcome
    data = digits_load()
    served = tf.saved_model.load(outcome.export_path).signatures["serving_default"]
    spec_in = served.structured_input_signature[1]["inputs"]
    assert spec_in.dtype == tf.float32 and spec_in.shape.as_list() == [None, 64]
    assert set(served.structured_outputs) == {"probabilities", "class_id"}
    result = served(inputs=tf.constant(data.x_test))  # raw 0..16 pixels, no scaling here
    # The same architecture restored from the final checkpoint, outside the trial process.
    module = user_module_load(path=digits_module)
    model = module.build_model({"input_shape": [64], "num_classes": 10})
    latest = tf.train.latest_checkpoint(str(Path(outcome.export_path).parent / "checkpoints"))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    expected = model.predict(data.x_test, verbose=0)
    np.testing.assert_allclose(result["probabilities"].numpy(), expected, atol=1e-6)
    np.testing.assert_array_equal(result["class_id"].numpy(), expected.argmax(axis=1))
    accuracy = float(np.mean(result["class_id"].numpy() == data.y_test))
    assert accuracy == pytest.approx(outcome.final_metrics["val_accuracy"], abs=1e-6)
    assert isinstance(model, keras.Model)
