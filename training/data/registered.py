"""A registered sharded dataset (TFRecord, Parquet or CSV shards) as the trial's pipelines.

`shards.py` reads one split for one input pipeline, each pipeline its own files; here those
examples are shuffled in a bounded buffer (the `shuffle_buffer` hyperparameter, in examples, and
at most SHUFFLE_BYTES of them by the registered average size: memory stays flat however large the
dataset) and batched per replica. The example counts and classes come from the
registration, so nothing is counted at run time.
"""

from __future__ import annotations

from typing import Any

from training.data.pipelines import DatasetContext, PipelineData, Where, pipelines_probe
from training.data.shards import shards_dataset
from training.shard_schema import ShardedSource
from training.trial.tfenv import tf

# What the shuffle buffer may hold, whatever `shuffle_buffer` asks: examples can be large.
SHUFFLE_BYTES = 128 * 2**20
# What tf.data's autotuner may spend on prefetching: it sizes buffers from the node's memory
# otherwise, which is not what a trial may use.
AUTOTUNE_RAM_BYTES = 256 * 2**20


def registered_pipelines(*, source: dict[str, Any], hparams: dict[str, Any],
                         global_batch_size: int, where: Where) -> PipelineData:
    registered = ShardedSource.from_dict(source)
    example_bytes = max(1, registered.size_bytes // max(1, registered.train_examples))
    buffer = min(hparams["shuffle_buffer"], SHUFFLE_BYTES // example_bytes)

    def build(ctx: DatasetContext) -> dict[str, Any]:
        def split(name: str) -> Any:
            dataset = shards_dataset(
                source=registered, split=name, num_input_pipelines=ctx.num_input_pipelines,
                input_pipeline_id=ctx.input_pipeline_id, shuffle_seed=None,
            )
            if name == "train" and buffer > 1:
                dataset = dataset.shuffle(buffer, reshuffle_each_iteration=True)
            options = tf.data.Options()
            options.autotune.ram_budget = AUTOTUNE_RAM_BYTES
            return dataset.batch(ctx.per_replica_batch_size,
                                 drop_remainder=True).with_options(options)

        return {"train": split("train"), "validation": split("validation")}

    return pipelines_probe(
        name=registered.name, build=build, hparams=hparams, global_batch_size=global_batch_size,
        where=where,
        counts={"train_examples": registered.train_examples,
                "validation_examples": registered.validation_examples,
                "num_classes": registered.num_classes},
    )
