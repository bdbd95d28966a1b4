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
from tfplatform.datasets.models import Dataset

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

EXAMPLE = ROOT / "examples" / "spark" / "digits_parquet.py"
DIGITS = 1797


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
        example.digits_write(spark=spark, folder=root / "digits-spark")
    finally:
        spark.stop()
    yield root, example


def test_a_spark_jobs_parquet_is_registered_and_read_by_two_pipelines_file_by_file(
    spark_output: tuple[Path, Any], settings: Any
) -> None:
    from training.shards import shard_files, shards_dataset

    root, example = spark_output
    settings.PLATFORM = {**settings.PLATFORM, "DATASET_ROOTS": [root]}
    folder = root / "digits-spark"
    paths = {split: str(folder / split) for split in ("train", "validation")}
    client = APIClient()
    client.force_authenticate(UserFactory())
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
