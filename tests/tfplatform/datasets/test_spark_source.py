"""Spark as a data source: a pyspark job's Parquet output registered and read back by shards.

One local[1] Spark session per module (it takes tens of seconds to start); the job is the
documented example's own (examples/spark/digits_parquet.py).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import ROOT
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.datasets.models import Dataset

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

EXAMPLE = ROOT / "examples" / "spark" / "digits_parquet.py"
DIGITS = 1797
# The job's owner: a teamless user's datasets live in <root>/users/<username>.
SPARK_USER = "spark-user"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("digits_parquet", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spark_output(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    if shutil.which("java") is None:
        pytest.skip("pyspark needs Java 17 (Debian's openjdk-17-jre-headless)")
    example = _example()
    root = tmp_path_factory.mktemp("dataset-root")
    spark = example.spark_local(cores="1")
    try:
        example.digits_write(spark=spark, folder=root / "users" / SPARK_USER / "digits-spark")
    finally:
        spark.stop()
    yield root, example


def test_a_spark_jobs_parquet_is_registered_and_read_by_two_pipelines_file_by_file(
    spark_output: tuple[Path, Any], settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    from training.data.shards import shard_files, shards_dataset

    root, example = spark_output
    platform_settings_override(dataset_roots=[root])
    folder = root / "users" / SPARK_USER / "digits-spark"
    paths = {split: str(folder / split) for split in ("train", "validation")}
    client = APIClient()
    client.force_authenticate(UserFactory(username=SPARK_USER))
    response = client.post("/api/v1/datasets/", example.registration(name="digits-spark",
                                                                      paths=paths), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["train_examples"] + body["validation_examples"] == DIGITS
    assert body["num_classes"] == 10  # the label column's largest value, from the footers
    assert body["label_spec"] == {"dtype": "int64", "shape": []}

    source = Dataset.objects.get(pk=body["id"]).source()
    files = shard_files(uri=source.train)
    assert len(files) == 4 and all(f.endswith(".parquet") for f in files)  # no _SUCCESS, .crc
    import pyarrow.parquet as pq

    rows = {path: pq.read_metadata(path).num_rows for path in files}
    counts = []
    for pipeline in range(2):
        dataset = shards_dataset(source=source, split="train", num_input_pipelines=2,
                                 input_pipeline_id=pipeline, shuffle_seed=3)
        seen = 0
        for x, y in dataset:
            assert x.shape == (64,) and 0 <= int(y) < 10
            seen += 1
        counts.append(seen)
    # Pipeline i reads exactly files i, i+2 (their rows, from the footers): disjoint halves
    # that together are every training example once.
    assert counts == [sum(rows[f] for f in files[i::2]) for i in range(2)]
    assert sum(counts) == body["train_examples"]


@pytest.mark.django_db(transaction=True)
def test_an_experiment_trains_on_the_spark_jobs_parquet_through_the_platform(
    spark_output: tuple[Path, Any], settings: Any, tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    """The modern TensorFlowOnSpark path: Spark writes, the platform registers and trains."""
    from tests import live
    from tfplatform.cluster.models import Node
    from tfplatform.experiments.models import Experiment

    root, example = spark_output
    work = tmp_path / "work"
    platform_settings_override(dataset_roots=[root], work_dir=work)
    folder = root / "users" / SPARK_USER / "digits-spark"
    client = APIClient()
    client.force_authenticate(UserFactory(username=SPARK_USER))
    paths = {split: str(folder / split) for split in ("train", "validation")}
    registered = client.post("/api/v1/datasets/", example.registration(
        name="digits-spark", paths=paths), format="json")
    assert registered.status_code == 201, registered.json()
    log = tmp_path / "worker.log"
    node = f"spark-{tmp_path.name[-12:]}"
    worker = live.worker_start(node=node, log=log, PLATFORM_WORK_DIR=str(work),
                               PLATFORM_DATASET_ROOTS=str(root))
    try:
        live.wait_for(lambda: Node.objects.filter(hostname=node).exists(), timeout=60,
                      what="node registration", log=log)
        created = client.post("/api/v1/experiments/", {
            "name": "digits from spark", "model": "mlp", "dataset": "digits-spark",
            "hyperparameters": {"epochs": 3, "batch_size": 32, "learning_rate": 0.01},
            "target_accuracy": 0.8,
        }, format="json")
        assert created.status_code == 201, created.json()
        experiment_id = created.json()["id"]
        live.wait_for(
            lambda: Experiment.objects.get(pk=experiment_id).state in ("completed", "failed"),
            timeout=240, what="training", log=log,
        )
    finally:
        live.stop(worker)
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", experiment.error
    assert experiment.results["final_metrics"]["val_accuracy"] >= 0.8
    assert experiment.results["time_to_target_seconds"] is not None
