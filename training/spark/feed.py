"""A barrier task's partition of a Spark query, handed to its trial process without a file:
TensorFlowOnSpark's InputMode.SPARK with the platform's `build_dataset(ctx)` contract.

The task reads its partition's rows into an Arrow table, tells its peers how many it holds
(the gang's workers must agree on the steps of an epoch), and writes the table to a pipe as an
Arrow IPC stream; the trial process reads the stream once, at the first `ctx.spark_partition()`,
into one column array per field, and keeps it for every epoch:

    table = feed_table(rows=partition_rows)                  # the task (task.py)
    feed_write(table=table, fd=write_end)                    # the task, a thread
    columns = feed_read()                                    # the trial (PLATFORM_SPARK_FEED_FD)
    sizes = feed_sizes()                                     # every worker's row count, in order

The query is the experiment's `spark_query` hyperparameter; the driver runs it on the cluster
and splits its result into one partition per worker (driver.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from training.spark.target import QUERY_HYPERPARAMETER

FEED_FD_ENV = "PLATFORM_SPARK_FEED_FD"
FEED_SIZES_ENV = "PLATFORM_SPARK_FEED_ROWS"
BATCH_ROWS = 1024


def feed_table(*, rows: Iterable[Any]) -> Any:
    """The partition's rows (pyspark Rows or dicts) as one Arrow table."""
    import pyarrow as pa

    batches, batch = [], []
    for row in rows:
        batch.append(row.asDict() if hasattr(row, "asDict") else dict(row))
        if len(batch) == BATCH_ROWS:
            batches.append(pa.Table.from_pylist(batch))
            batch = []
    if batch or not batches:
        batches.append(pa.Table.from_pylist(batch))
    return pa.concat_tables(batches, promote_options="default")


def feed_write(*, table: Any, fd: int) -> None:
    """Writes the table to `fd` and closes it. A trial that ends without reading all of it
    ends the write."""
    import pyarrow as pa

    with os.fdopen(fd, "wb") as pipe:
        try:
            with pa.ipc.new_stream(pipe, table.schema) as writer:
                writer.write_table(table, max_chunksize=BATCH_ROWS)
        except (BrokenPipeError, OSError):
            pass


_columns: dict[str, Any] | None = None


def feed_read() -> dict[str, Any]:
    """This task's partition as {column: numpy array}, read once per process."""
    global _columns
    if _columns is None:
        fd = os.environ.get(FEED_FD_ENV)
        if not fd:
            raise RuntimeError(
                "this trial has no Spark input: ctx.spark_partition() reads the rows of the "
                f"experiment's `{QUERY_HYPERPARAMETER}`, run on a Spark cluster's pool")
        import pyarrow as pa

        with os.fdopen(int(fd), "rb") as pipe:
            table = pa.ipc.open_stream(pipe).read_all()
        _columns = {name: table.column(name).to_numpy(zero_copy_only=False)
                    for name in table.column_names}
    return _columns


def feed_sizes() -> list[int]:
    """How many rows each worker's partition holds, in worker order."""
    text = os.environ.get(FEED_SIZES_ENV, "")
    return [int(size) for size in text.split(",")] if text else []
