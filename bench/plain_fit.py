"""The platform's training work as a plain `model.fit` script, the baseline of bench/overhead.py:

    python -m bench.plain_fit --out result.json --epochs 8 --hidden-units 256

Same zoo model, same arrays, same tf.data pipeline, same compile (optimizer, loss, metric) and
seed as a one-process platform trial; no strategy scope, supervisor, events or checkpoints. It
writes when its first training step ended and, per epoch, how long fit's epoch took and when it
ended (wall clock), measured the way the platform's EpochReporter measures them.

`--keras-callbacks` adds what a careful script keeps between epochs, the peer for the platform's
cost there: tf-keras' ModelCheckpoint (the best epoch's weights), BackupAndRestore (model and
optimizer every epoch, for a restart) and TensorBoard (epoch scalars and the graph).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from training import catalog
from training.data.array_pipelines import dataset_eval, dataset_train, steps_per_epoch
from training.scaling import batch_plan
from training.spec import TrialSpec
from training.trial.modelling import model_compile
from training.trial.tfenv import keras  # sets TF_USE_LEGACY_KERAS=1 before TensorFlow loads
from training.trial.zoo import ZOO_BUILDERS


class Timing(keras.callbacks.Callback):
    _supports_tf_logs = True  # as the platform's step callbacks: no per-step NumPy copy of logs

    def __init__(self, *, images_per_epoch: int) -> None:
        super().__init__()
        self.images_per_epoch = images_per_epoch
        self.first_step_at: float | None = None
        self.epochs: list[dict[str, Any]] = []
        self._began = 0.0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch == 0 and self.first_step_at is None:
            self.first_step_at = time.time()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._began = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        seconds = time.perf_counter() - self._began
        self.epochs.append({
            "epoch": epoch + 1, "seconds": seconds, "ended_at": time.time(),
            "images_per_sec": self.images_per_epoch / seconds,
            "val_accuracy": float((logs or {}).get("val_accuracy", float("nan"))),
        })


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.plain_fit")
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.001)
    parser.add_argument("--hidden-units", type=int, default=256)
    parser.add_argument("--keras-callbacks", action="store_true")
    args = parser.parse_args(argv)
    hparams = catalog.hyperparameters_resolve(model=args.model, values={
        "epochs": args.epochs, "batch_size": args.batch_size,
        "learning_rate": args.learning_rate, "hidden_units": args.hidden_units,
    })
    keras.utils.set_random_seed(hparams["seed"])
    spec = TrialSpec(trial_id="plain", model=args.model, dataset=args.dataset, work_dir="")
    data = catalog.dataset_load(spec=spec, hparams=hparams)
    batch = batch_plan(batch_size=hparams["batch_size"], replicas=1,
                       learning_rate=hparams["learning_rate"], scale=True, warmup_epochs=0)
    steps = steps_per_epoch(examples=len(data.x_train), global_batch=batch.global_batch_size)
    model = ZOO_BUILDERS[args.model](hparams=hparams, data=data)
    model_compile(model=model, hparams=hparams, batch=batch, steps_per_epoch=steps,
                  exact_evaluation=False)
    timing = Timing(images_per_epoch=steps * batch.global_batch_size)
    with tempfile.TemporaryDirectory(prefix="plain-fit-") as scratch:
        callbacks = [timing, *(_keras_callbacks(directory=scratch) if args.keras_callbacks
                               else [])]
        _fit(model=model, data=data, hparams=hparams, batch=batch, steps=steps,
             callbacks=callbacks)
    Path(args.out).write_text(json.dumps({
        "first_step_at": timing.first_step_at, "epochs": timing.epochs,
        "global_batch": batch.global_batch_size,
    }))


def _keras_callbacks(*, directory: str) -> list[Any]:
    # Timing comes first, so each epoch's end is taken before these run, as for the platform.
    return [
        keras.callbacks.ModelCheckpoint(f"{directory}/best", monitor="val_accuracy",
                                        save_best_only=True, save_weights_only=True),
        keras.callbacks.BackupAndRestore(f"{directory}/backup"),
        keras.callbacks.TensorBoard(f"{directory}/tensorboard"),
    ]


def _fit(*, model: Any, data: Any, hparams: dict[str, Any], batch: Any, steps: int,
         callbacks: list[Any]) -> None:
    model.fit(
        dataset_train(data=data, batch_size=batch.global_batch_size, seed=hparams["seed"],
                      augment=hparams["augment"]),
        epochs=hparams["epochs"], steps_per_epoch=steps,
        validation_data=dataset_eval(data=data, batch_size=batch.global_batch_size),
        callbacks=callbacks, verbose=0,
    )


if __name__ == "__main__":
    main()
