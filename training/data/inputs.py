"""What a trial trains on: arrays held in memory, or tf.data pipelines streamed per input pipeline.

Where it comes from, in order: the user module's `build_dataset(ctx)` (arrays or pipelines), a
registered sharded dataset (`TrialSpec.dataset_source`, streamed by `shards.py`), or a built-in or
uploaded dataset loaded as arrays. Both kinds answer what the model and the export ask
(`num_classes`, `input_shape`, `feature_sample`, the label dtype); `datasets.py` distributes arrays
and `pipelines.py` pipelines.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from training import catalog
from training.arrays import ArrayData, arrays_check
from training.data.pipelines import (
    PipelineData,
    ProbeContext,
    Where,
    context_make,
    pipelines_probe,
)
from training.errors import InvalidInput, UserCodeError, traceback_tail
from training.spec import TrialSpec
from training.trial.tfenv import tf

Data = ArrayData | PipelineData


def data_load(*, spec: TrialSpec, hparams: dict[str, Any], module: ModuleType | None,
              global_batch_size: int, probe: ProbeContext) -> Data:
    where = Where(datasets_dir=spec.datasets_dir, dataset=spec.dataset_source, probe=probe)
    if module is not None:
        found = user_data_load(module=module, hparams=hparams,
                               global_batch_size=global_batch_size,
                               where=where)
        if found is not None:
            return found
    if spec.dataset_source:
        from training.data.registered import registered_pipelines  # reads shards with TF's readers

        return registered_pipelines(source=spec.dataset_source, hparams=hparams,
                                    global_batch_size=global_batch_size,
                                    where=where)
    return catalog.dataset_load(spec=spec, hparams=hparams)


def data_train_examples(*, data: Data) -> int:
    return len(data.x_train) if isinstance(data, ArrayData) else data.train_examples


def user_data_load(*, module: ModuleType, hparams: dict[str, Any], global_batch_size: int,
                   where: Where) -> Data | None:
    """What the module's build_dataset gives: arrays as before, or tf.data pipelines."""
    build_dataset = getattr(module, catalog.USER_DATASET_ENTRY, None)
    if build_dataset is None:
        return None
    name = f"{module.__name__}.build_dataset"
    ctx = context_make(hparams=hparams, input_context=where.probe,
                       global_batch_size=global_batch_size, where=where)
    try:
        result = build_dataset(ctx)
    except Exception as exc:
        raise UserCodeError(f"build_dataset failed:\n{traceback_tail(exc)}") from exc
    if _holds_datasets(result):
        return pipelines_probe(name=name, build=build_dataset, hparams=hparams,
                               global_batch_size=global_batch_size, where=where, built=result)
    try:
        if isinstance(result, dict):
            result = tuple(result[key] for key in ("x_train", "y_train", "x_test", "y_test"))
        x_train, y_train, x_test, y_test = result
        return arrays_check(name=name, x_train=x_train, y_train=y_train, x_test=x_test,
                            y_test=y_test)
    except InvalidInput as exc:
        raise UserCodeError(f"build_dataset returned unusable arrays: {exc}") from exc
    except Exception as exc:
        raise UserCodeError(
            "build_dataset must return {'train': tf.data.Dataset, 'validation': "
            "tf.data.Dataset} or the arrays (x_train, y_train, x_test, y_test); "
            f"it returned {type(result).__name__}: {exc}"
        ) from exc


def _holds_datasets(result: Any) -> bool:
    values = result.values() if isinstance(result, dict) else (
        result if isinstance(result, tuple | list) else ())
    return any(isinstance(value, tf.data.Dataset) for value in values)


