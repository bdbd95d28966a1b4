"""TensorBoard event files of a trial: scalars and the graph always, histograms and a profiler
trace on request.

    tensorboard_histograms: write each layer's weight histograms at every epoch's end
    profile_steps:          "" (no trace) | "N" | "start,stop": trace those steps of this attempt
                            (counted from 1 when its `fit` starts), at most PROFILE_STEPS_MAX

The chief writes to `<work_dir>/tensorboard` (`train/`, `validation/`, and the trace under
`plugins/profile/`), which the platform serves behind its sign-in. Other MultiWorkerMirrored tasks
take part in every write (reading a sync-on-read variable for a histogram is a collective) but
into a scratch folder under `<work_dir>/tmp` that tf-keras removes when training ends, as its
multi-worker guidance says. A resumed trial appends to the same folder: its epochs continue the
step numbers, and an epoch written before a crash but never checkpointed is written again, which
TensorBoard takes as a restart and keeps the newer points of.

Parameter-server training allows no batch-level callbacks: the scalars are written per epoch
(`update_freq="epoch"`, no steps-per-second) and a trace is refused at submission
(`board_check`). `board_check` and `profile_steps_parse` are TF-free (the web process refuses up
front); `board_callbacks` runs in the trial.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from training.errors import InvalidInput
from training.spec import Resources

BOARD_DIR = "tensorboard"
SCRATCH_DIR = "tmp/tensorboard"
PROFILE_STEPS_MAX = 20  # a trace of a few steps; longer ones are large and slow to write
PROFILE_STEP_LAST = 1_000_000


def profile_steps_parse(*, value: str) -> tuple[int, int] | None:
    """(start, stop), both included and counted from 1, or None for no trace."""
    text = value.strip()
    if not text:
        return None
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 2 or not all(part.isascii() and part.isdigit() for part in parts):
        raise InvalidInput(
            f'hyperparameter profile_steps must be "" (no trace), a step "N" or a range '
            f'"start,stop" such as "10,15", got {value!r}'
        )
    start, stop = int(parts[0]), int(parts[-1])
    if not 1 <= start <= stop <= PROFILE_STEP_LAST:
        raise InvalidInput(
            f"hyperparameter profile_steps must name steps from 1 to {PROFILE_STEP_LAST:,}, "
            f"start first, got {value!r}"
        )
    if stop - start + 1 > PROFILE_STEPS_MAX:
        raise InvalidInput(
            f"hyperparameter profile_steps traces at most {PROFILE_STEPS_MAX} steps, "
            f"got {stop - start + 1} ({value!r})"
        )
    return start, stop


def board_check(*, profile_steps: str, resources: Resources) -> None:
    """What can be refused before anything runs: a malformed range, a trace beside parameter
    servers (the profiler is started and stopped from batch hooks, which they forbid)."""
    if profile_steps_parse(value=profile_steps) is not None and resources.parameter_servers:
        raise InvalidInput(
            "profile_steps cannot be used with parameter servers: the profiler is started and "
            "stopped at step boundaries, and parameter-server training allows no step-level "
            "callbacks; profile the same model without parameter servers"
        )


def board_available() -> bool:
    """Whether this Python can write summaries: TensorFlow leaves them to the tensorboard
    package, which an environment's own image may not have."""
    return importlib.util.find_spec("tensorboard") is not None


def board_callbacks(*, work_dir: str, hparams: dict[str, Any], is_chief: bool) -> list[Any]:
    """The trial's TensorBoard callback: every task gets one, only the chief's files remain."""
    from training.trial.tfenv import keras

    steps = profile_steps_parse(value=hparams["profile_steps"])
    return [keras.callbacks.TensorBoard(
        log_dir=f"{work_dir}/{BOARD_DIR if is_chief else SCRATCH_DIR}",
        histogram_freq=1 if hparams["tensorboard_histograms"] else 0,
        write_graph=True,
        update_freq="epoch",
        profile_batch=steps if steps is not None and is_chief else 0,
    )]
