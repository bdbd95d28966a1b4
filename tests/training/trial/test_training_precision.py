"""Mixed precision and XLA as hyperparameters: the same module trains in bfloat16 under every
strategy (its step compiled by XLA where TF can compile it) and exports a model that serves
float32; what this machine cannot do (float16 on CPUs, XLA collectives on CPUs, XLA beside
parameter servers) is refused with a reason instead of being ignored. On a machine with NVIDIA
GPUs the GPU-slot cases train instead: the suite never assumes the absence of hardware."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tfplatform.cluster.discovery import gpus_discover
from training.catalog import spec_validate
from training.errors import InvalidInput
from training.precision import cpu_has_bf16
from training.spec import Resources

pytestmark = pytest.mark.slow

FAST = {"epochs": 3, "batch_size": 32, "learning_rate": 0.01}


@pytest.mark.parametrize(
    ("resources", "jit_compile"),
    [(Resources(), True), (Resources(gpus_per_worker=2), False), (Resources(workers=2), False),
     (Resources(workers=2, parameter_servers=1), False)],
    ids=["default_xla", "mirrored", "multi_worker", "parameter_server"],
)
def test_bfloat16_trains_under_every_strategy(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any], resources: Resources, jit_compile: bool,
) -> None:
    spec = make_spec(work_dir=tmp_path / "trial", model=digits_module, resources=resources,
                     hyperparameters={**FAST, "mixed_precision": "mixed_bfloat16",
                                      "jit_compile": jit_compile})
    spec_validate(spec=spec)
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    [precision] = run.phase("precision", task="chief:0" if resources.parameter_servers
                            else "worker:0")
    assert precision["policy"] == "mixed_bfloat16" and precision["jit_compile"] is jit_compile
    assert (precision["compute_dtype"], precision["variable_dtype"]) == ("bfloat16", "float32")
    slow_note = [e for e in run.payloads("log") if "bfloat16 is converted in software"
                 in e.get("message", "")]
    assert bool(slow_note) == (not cpu_has_bf16())
    assert run.outcome.final_metrics["val_accuracy"] >= 0.8
    [export] = run.payloads("export")
    assert export["outputs"]["probabilities"]["dtype"] == "float32"


def test_float16_is_refused_on_cpus_before_and_while_running(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    asked = {**FAST, "mixed_precision": "mixed_float16"}
    on_cpus = make_spec(work_dir=tmp_path / "cpu", model=digits_module, hyperparameters=asked)
    with pytest.raises(InvalidInput, match="mixed_float16 needs NVIDIA GPUs"):
        spec_validate(spec=on_cpus)
    with pytest.raises(InvalidInput, match="mixed_precision must be one of"):
        spec_validate(spec=make_spec(work_dir=tmp_path / "typo", model=digits_module,
                                     hyperparameters={"mixed_precision": "float8"}))

    # A GPU slot: only the trial can tell whether it is a real GPU or emulated on CPUs.
    slot = make_spec(work_dir=tmp_path / "gpu", model=digits_module, hyperparameters=asked,
                     resources=Resources(gpus_per_worker=1))
    spec_validate(spec=slot)
    run = run_trial(spec=slot)
    if gpus_discover():  # a machine with NVIDIA GPUs: float16 runs, or its GPUs are too old
        assert run.outcome.status == "completed" or (
            "needs GPUs of compute capability 7.0" in run.outcome.exit_reason)
        return
    assert run.outcome.status == "failed" and not run.outcome.retryable
    assert "emulated on its CPUs, which have no float16 units" in run.outcome.exit_reason


def test_xla_is_refused_where_tensorflow_cannot_compile_the_step(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    def spec(name: str, resources: Resources) -> Any:
        return make_spec(work_dir=tmp_path / name, model=digits_module, resources=resources,
                         hyperparameters={**FAST, "jit_compile": True})

    with pytest.raises(InvalidInput, match="cannot be used with parameter servers"):
        spec_validate(spec=spec("ps", Resources(workers=2, parameter_servers=1)))
    with pytest.raises(InvalidInput, match="XLA has no collectives for CPU devices"):
        spec_validate(spec=spec("mwms", Resources(workers=2)))
    # Two GPU slots: only the trial can tell whether they are GPUs or emulated on CPUs.
    slots = spec("mirrored", Resources(gpus_per_worker=2))
    spec_validate(spec=slots)
    run = run_trial(spec=slots)
    if len(gpus_discover()) >= 2:  # real GPUs have XLA collectives
        assert run.outcome.status == "completed", run.outcome.exit_reason
        return
    assert run.outcome.status == "failed" and not run.outcome.retryable
    assert "this node's GPU slots are emulated on CPUs" in run.outcome.exit_reason
