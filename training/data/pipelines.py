"""Input as tf.data pipelines: a module's `build_dataset(ctx)`, or a registered sharded dataset.

A pipeline is built once per input pipeline (one per worker under MultiWorkerMirroredStrategy) with
a `DatasetContext` and must yield batches of `ctx.per_replica_batch_size`: TF's contract for
`distribute_datasets_from_function`, which the synchronous strategies use here, so each worker reads
only its own part (`ctx.shard_files`, or `dataset.shard(ctx.num_input_pipelines,
ctx.input_pipeline_id)`). Parameter-server training hands the same function to a `DatasetCreator`:
TF traces it once for every worker, so there each worker reads all of it in its own shuffled order.

The training split is repeated and cut into epochs of `train_examples // global_batch` steps, so
workers whose shards differ in size still take the same number of steps (a collective per step).
Validation runs `validation_examples // global_batch` steps per epoch for the same reason (parameter
servers evaluate the whole split once instead).

Before any of that, the trial builds the pipelines once as pipeline 0 of 1 (`pipelines_probe`): a
module whose `build_dataset` fails, returns something else or leaves the example counts unknown
fails in seconds as a user error, and the model is built from the element specs found there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.errors import UserCodeError, traceback_tail
from training.trial.tfenv import keras, tf

SPLITS = ("train", "validation")
FEATURE_ROWS = 1024
# ... and at most this much of them: rows of a large dataset can be large (images, volumes).
FEATURE_BYTES = 32 * 2**20


@dataclass(frozen=True)
class ProbeContext:
    """This worker's place among the input pipelines, as TF's InputContext will give it."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        return global_batch_size // self.num_replicas_in_sync


@dataclass(frozen=True)
class Where:
    datasets_dir: str = ""
    dataset: dict[str, Any] = field(default_factory=dict)
    probe: ProbeContext = field(default_factory=ProbeContext)


class DatasetContext(dict):
    """The hyperparameters (a dict, as `build_dataset(hparams)` always received) plus where this
    input pipeline stands: `num_input_pipelines`, `input_pipeline_id`, `global_batch_size`,
    `per_replica_batch_size`, `num_replicas_in_sync`."""

    def __init__(self, *, hparams: dict[str, Any], num_input_pipelines: int,
                 input_pipeline_id: int, global_batch_size: int, per_replica_batch_size: int,
                 num_replicas_in_sync: int, where: Where) -> None:
        super().__init__(hparams)
        # Where the operator's datasets live (readable by every trial), and the registered
        # dataset chosen with the module, if any (its format, shard URIs and schema).
        self.datasets_dir = where.datasets_dir
        self.dataset = dict(where.dataset)
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.global_batch_size = global_batch_size
        self.per_replica_batch_size = per_replica_batch_size
        self.num_replicas_in_sync = num_replicas_in_sync

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self)

    def spark_partition(self) -> dict[str, Any]:
        """On a Spark cluster's pool with the experiment's `spark_query`: this worker's
        partition of the query's result, {column: numpy array}, handed over by its Spark task
        without a file (training/spark/feed.py); read once, the same for every epoch."""
        from training.spark.feed import feed_read

        return feed_read()

    def spark_partition_sizes(self) -> list[int]:
        """How many rows each worker's partition holds, in worker order: an epoch's steps are
        the gang's to agree on (return `"train_examples": sum(...)`, say)."""
        from training.spark.feed import feed_sizes

        return feed_sizes()

    def shard_files(self, files: str | list[str]) -> list[str]:
        """This pipeline's files of a glob or list: sorted, then every n-th from its index, so
        the pipelines together read each file exactly once."""
        names = sorted(tf.io.gfile.glob(files) if isinstance(files, str) else files)
        if len(names) < self.num_input_pipelines:
            raise ValueError(
                f"{len(names)} files cannot be split over {self.num_input_pipelines} input "
                "pipelines: write at least one file per worker"
            )
        return names[self.input_pipeline_id::self.num_input_pipelines]


def context_make(*, hparams: dict[str, Any], input_context: Any, global_batch_size: int,
                 where: Where) -> DatasetContext:
    """From TF's InputContext (None where TF gives none: one pipeline, one replica)."""
    if input_context is None:
        return DatasetContext(hparams=hparams, num_input_pipelines=1, input_pipeline_id=0,
                              global_batch_size=global_batch_size,
                              per_replica_batch_size=global_batch_size, num_replicas_in_sync=1,
                              where=where)
    return DatasetContext(
        hparams=hparams, where=where, num_input_pipelines=int(input_context.num_input_pipelines),
        input_pipeline_id=int(input_context.input_pipeline_id),
        global_batch_size=global_batch_size,
        per_replica_batch_size=int(input_context.get_per_replica_batch_size(global_batch_size)),
        num_replicas_in_sync=int(input_context.num_replicas_in_sync),
    )


Builder = Callable[[DatasetContext], dict[str, Any]]


@dataclass(frozen=True)
class PipelineData:
    name: str
    build: Builder  # ctx -> {"train": Dataset, "validation": Dataset}, per-replica batches
    where: Where
    train_examples: int
    validation_examples: int
    num_classes: int | None
    x_spec: Any  # one example's input spec(s), without the batch dimension
    y_spec: Any
    # Training inputs (numpy, or a dict of numpy): built-in models' scaling, the export's check.
    sample: Any

    @property
    def input_shape(self) -> tuple[int | None, ...]:
        if not isinstance(self.x_spec, tf.TensorSpec):
            raise UserCodeError(
                f"dataset {self.name} has several inputs ({', '.join(self.x_spec)}): the built-in "
                "models take one; use a module whose build_model reads hparams['input_specs']"
            )
        return tuple(self.x_spec.shape)

    @property
    def feature_sample(self) -> np.ndarray:
        """Up to FEATURE_ROWS training inputs: what built-in models take their scaling from."""
        if isinstance(self.sample, dict):
            raise UserCodeError(f"dataset {self.name} has several inputs; the built-in models "
                                "take one")
        return np.asarray(self.sample)

    def y_spec_integer(self) -> bool:
        return isinstance(self.y_spec, tf.TensorSpec) and self.y_spec.dtype.is_integer

    def y_dtype_name(self) -> str:
        specs = tf.nest.flatten(self.y_spec)
        return ", ".join(sorted({spec.dtype.name for spec in specs}))

    def input_specs(self) -> dict[str, dict[str, Any]]:
        specs = self.x_spec if isinstance(self.x_spec, dict) else {"inputs": self.x_spec}
        return {name: {"dtype": spec.dtype.name, "shape": list(spec.shape)}
                for name, spec in specs.items()}

    def summary(self) -> dict[str, object]:
        summary: dict[str, object] = {
            "name": self.name, "kind": "pipeline", "train_examples": self.train_examples,
            "test_examples": self.validation_examples, "inputs": self.input_specs(),
            "num_classes": self.num_classes,
        }
        if isinstance(self.x_spec, tf.TensorSpec):
            summary.update(input_shape=list(self.x_spec.shape), input_dtype=self.x_spec.dtype.name)
        return summary


def _unbatched(spec: Any) -> Any:
    return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype, s.name), spec)


def _examples(*, given: Any, dataset: Any, batch: int, pipelines: int, split: str, name: str
              ) -> int:
    if given is not None:
        try:
            count = int(given)
        except (TypeError, ValueError) as exc:
            raise UserCodeError(f"{split}_examples must be a number, got {given!r}") from exc
    else:
        batches = int(dataset.cardinality().numpy())
        if batches < 0:
            raise UserCodeError(
                f"{name}: the number of {split} examples is unknown (the dataset's cardinality is "
                f"{'infinite' if batches == tf.data.INFINITE_CARDINALITY else 'unknown'}); return "
                f"{{'train': ..., 'validation': ..., '{split}_examples': N}}"
            )
        count = batches * batch * pipelines
    if count < 1:
        raise UserCodeError(f"{name}: the {split} split is empty")
    return count


def _result_check(*, result: Any, name: str) -> dict[str, Any]:
    if isinstance(result, tuple | list) and len(result) == 2:
        result = {"train": result[0], "validation": result[1]}
    if not isinstance(result, dict) or any(
        not isinstance(result.get(split), tf.data.Dataset) for split in SPLITS
    ):
        raise UserCodeError(
            f"{name} must return {{'train': tf.data.Dataset, 'validation': tf.data.Dataset}} "
            "(or numpy arrays x_train, y_train, x_test, y_test)"
        )
    for split in SPLITS:
        spec = result[split].element_spec
        if not isinstance(spec, tuple) or len(spec) != 2:
            raise UserCodeError(f"{name}: the {split} dataset must yield (inputs, labels) pairs")
    return result


def pipelines_probe(*, name: str, build: Builder, hparams: dict[str, Any], global_batch_size: int,
                    where: Where, counts: dict[str, Any] | None = None,
                    built: Any = None) -> PipelineData:
    """Builds this worker's pipelines once, before training, to learn their specs and sizes
    (`built`: what `build` already returned for this worker's context); a size found from a
    cardinality is this pipeline's share times the pipelines."""
    ctx = context_make(hparams=hparams, input_context=where.probe,
                       global_batch_size=global_batch_size, where=where)
    try:
        result = _result_check(result=build(ctx) if built is None else built, name=name)
        counts = {**(counts or {}), **{k: v for k, v in result.items() if k not in SPLITS}}
        x_spec, y_spec = (_unbatched(s) for s in result["train"].element_spec)
        batches, rows, size = [], 0, 0
        for x, _ in result["train"]:
            batch = tf.nest.map_structure(np.asarray, x)
            batches.append(batch)
            rows += len(tf.nest.flatten(batch)[0])
            size += sum(part.nbytes for part in tf.nest.flatten(batch))
            if rows >= FEATURE_ROWS or size >= FEATURE_BYTES:
                break
        if not batches:
            raise UserCodeError(f"{name}: the train dataset yields nothing")
        sample = tf.nest.map_structure(lambda *parts: np.concatenate(parts)[:FEATURE_ROWS],
                                       *batches)
    except UserCodeError:
        raise
    except Exception as exc:
        raise UserCodeError(f"{name} failed:\n{traceback_tail(exc)}") from exc
    num_classes = counts.get("num_classes")
    return PipelineData(
        name=name, build=build, where=where,
        train_examples=_examples(given=counts.get("train_examples"), dataset=result["train"],
                                 batch=ctx.per_replica_batch_size,
                                 pipelines=ctx.num_input_pipelines,
                                 split="train", name=name),
        validation_examples=_examples(
            given=counts.get("validation_examples"), dataset=result["validation"],
            batch=ctx.per_replica_batch_size,
            pipelines=ctx.num_input_pipelines, split="validation",
            name=name),
        num_classes=int(num_classes) if num_classes is not None else None,
        x_spec=x_spec, y_spec=y_spec, sample=sample,
    )


def _split(*, data: PipelineData, hparams: dict[str, Any], input_context: Any, global_batch: int,
           split: str) -> Any:
    ctx = context_make(hparams=hparams, input_context=input_context,
                       global_batch_size=global_batch, where=data.where)
    dataset = _result_check(result=data.build(ctx), name=data.name)[split]
    return dataset.repeat().prefetch(tf.data.AUTOTUNE)


def pipeline_train(*, data: PipelineData, strategy: Any, hparams: dict[str, Any],
                   global_batch: int, parameter_servers: bool) -> Any:
    def dataset_fn(input_context: Any) -> Any:
        return _split(data=data, hparams=hparams, input_context=input_context,
                      global_batch=global_batch, split="train")

    if parameter_servers:
        return keras.utils.experimental.DatasetCreator(dataset_fn)
    return strategy.distribute_datasets_from_function(dataset_fn)


def pipeline_eval(*, data: PipelineData, strategy: Any, hparams: dict[str, Any],
                  global_batch: int, parameter_servers: bool) -> tuple[Any, int | None]:
    """The validation input and its steps per evaluation (None: the whole finite split)."""
    if parameter_servers:
        # Evaluated on the chief's side as one pipeline of global batches, visited exactly once.
        ctx = context_make(hparams=hparams, input_context=None, global_batch_size=global_batch,
                           where=data.where)
        dataset = _result_check(result=data.build(ctx), name=data.name)["validation"]
        # TF splits it into evaluation shards itself; by element, as a few files cannot be
        # split into its many shards.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        return dataset.with_options(options), None

    def dataset_fn(input_context: Any) -> Any:
        return _split(data=data, hparams=hparams, input_context=input_context,
                      global_batch=global_batch, split="validation")

    steps = max(1, data.validation_examples // global_batch)
    return strategy.distribute_datasets_from_function(dataset_fn), steps
