"""A registered sharded dataset (TFRecord, Parquet or CSV shards) as the trial's pipelines.

`shards.py` reads one split for one input pipeline, each pipeline its own files; here those
examples are shuffled in a bounded buffer (the `shuffle_buffer` hyperparameter: memory stays flat
however large the dataset) and batched per replica. The example counts and classes come from the
registration, so nothing is counted at run time.
"""

from __future__ import annotations

from typing import Any

from training.pipelines import DatasetContext, PipelineData, Where, pipelines_probe
from training.shard_schema import ShardedSource
from training.shards import shards_dataset


def registered_pipelines(*, source: dict[str, Any], hparams: dict[str, Any],
                         global_batch_size: int, where: Where) -> PipelineData:
    registered = ShardedSource.from_dict(source)

    def build(ctx: DatasetContext) -> dict[str, Any]:
        def split(name: str) -> Any:
            dataset = shards_dataset(
                source=registered, split=name, num_input_pipelines=ctx.num_input_pipelines,
                input_pipeline_id=ctx.input_pipeline_id, shuffle_seed=None,
            )
            if name == "train" and hparams["shuffle_buffer"] > 1:
                dataset = dataset.shuffle(hparams["shuffle_buffer"],
                                          reshuffle_each_iteration=True)
            return dataset.batch(ctx.per_replica_batch_size, drop_remainder=True)

        return {"train": split("train"), "validation": split("validation")}

    return pipelines_probe(
        name=registered.name, build=build, hparams=hparams, global_batch_size=global_batch_size,
        where=where,
        counts={"train_examples": registered.train_examples,
                "validation_examples": registered.validation_examples,
                "num_classes": registered.num_classes},
    )
