"""Spark as a data source: a Spark job writes Parquet shards, the platform trains on them.

    python examples/spark/digits_parquet.py --root var/data/users/$USER   # your folder of a root
        [--server http://127.0.0.1:8000] [--name digits-spark] [--no-submit]

The job (local mode here; the same code on a cluster with `--master`) writes scikit-learn's
digits as `pixels: array<float>[64]` and `label: long`, four shards for training and two for
validation under <root>/<name>/, as any Spark pipeline writes its output (<root>: your folder of a
PLATFORM_DATASET_ROOTS root, <root>/<team name> for a team, <root>/users/<username> without one).
Then, through the REST API with TFP_TOKEN (or `tfp login`'s stored token), it registers the
folders once as a dataset (schema and counts come from the Parquet footers; the list column's
length is given) and submits an experiment naming it. Each input pipeline of the trial reads
whole shards, so write at least as many shards as the trial will have workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

SHARDS = {"train": 4, "validation": 2}


def digits_write(*, spark: Any, folder: Path, shards: dict[str, int] = SHARDS) -> dict[str, str]:
    """Writes <folder>/train and <folder>/validation as Parquet; returns their paths."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rows = [([float(v) for v in x], int(y)) for x, y in zip(digits.data, digits.target,
                                                            strict=True)]
    frame = spark.createDataFrame(rows, "pixels array<float>, label long")
    train, validation = frame.randomSplit([0.8, 0.2], seed=7)
    written = {}
    for split, part in (("train", train), ("validation", validation)):
        path = folder / split
        part.repartition(shards[split]).write.mode("overwrite").parquet(str(path))
        written[split] = str(path.resolve())
    return written


def spark_local(*, cores: str = "*") -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(f"local[{cores}]").appName("digits-parquet")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4").getOrCreate())


def registration(*, name: str, paths: dict[str, str]) -> dict[str, Any]:
    """What POST /api/v1/datasets/ takes for the Spark output."""
    return {"name": name, "format": "parquet", **paths, "label": "label",
            "features": {"pixels": {"dtype": "float32", "shape": [64]}}}


def _api(server: str, token: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    import requests

    response = requests.post(f"{server}/api/v1/{path}", json=body, timeout=60,
                             headers={"Authorization": f"Token {token}"})
    if response.status_code >= 300:
        sys.exit(f"POST {path}: {response.status_code} {response.text}")
    return dict(response.json())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="your folder of a PLATFORM_DATASET_ROOTS "
                        "root: <root>/<team> or <root>/users/<username>")
    parser.add_argument("--name", default="digits-spark")
    parser.add_argument("--server", default=os.environ.get("TFP_SERVER", "http://127.0.0.1:8000"))
    parser.add_argument("--no-submit", action="store_true")
    args = parser.parse_args()
    spark = spark_local()
    try:
        paths = digits_write(spark=spark, folder=Path(args.root) / args.name)
    finally:
        spark.stop()
    if args.no_submit:
        print(json.dumps(registration(name=args.name, paths=paths), indent=2))
        return
    token = os.environ.get("TFP_TOKEN") or _stored_token()
    dataset = _api(args.server, token, "datasets/", registration(name=args.name, paths=paths))
    print(f"registered {dataset['name']}: {dataset['train_examples']} training examples")
    experiment = _api(args.server, token, "experiments/", {
        "name": f"{args.name}-mlp", "model": "mlp", "dataset": args.name,
        "hyperparameters": {"epochs": 5, "batch_size": 32}})
    print(f"experiment {experiment['id']} submitted: tfp logs {experiment['id']} --follow")


def _stored_token() -> str:
    config = Path(os.environ.get("TFP_CONFIG_DIR", Path.home() / ".config" / "tfp"))
    try:
        return str(json.loads((config / "credentials.json").read_text())["token"])
    except (OSError, KeyError, ValueError):
        sys.exit("no token: set TFP_TOKEN or run `tfp login`")


if __name__ == "__main__":
    main()
