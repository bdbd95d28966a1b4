"""A dataset version's content fingerprint: what its shard files are, found without reading them.

sha256 over each split's shard files in order: each one's path below the split's folder, its
size and its modification time (nanoseconds). Registration lists the shards anyway, so this
costs a stat per shard; reading the data (or even every Parquet footer) would cost as much as
an epoch's I/O on a large dataset. A file rewritten in place with the same size within the
file system's time resolution is not seen: the fingerprint says which files, not which bytes.
A remote split (gs://, s3://, hdfs://) is listed by TensorFlow inside the trial, never here:
it adds its URI alone.
"""

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from tfplatform.datasets.models import Dataset
from training.shard_schema import SPLITS, local_shards, uri_base, uri_scheme


def shards_fingerprint(*, splits: Mapping[str, tuple[str, Sequence[Path]]]) -> str:
    """`splits`: split → (its URI, its local shard files; none for a remote URI)."""
    digest = hashlib.sha256()
    for split in sorted(splits):
        uri, files = splits[split]
        if uri_scheme(uri) or not files:
            digest.update(f"{split}\turi\t{uri}\n".encode())
            continue
        base = uri_base(uri)
        for path in sorted(files):
            stat = path.stat()
            name = os.path.relpath(path, base)
            digest.update(f"{split}\t{name}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def dataset_fingerprint_now(*, dataset: Dataset) -> str:
    """The fingerprint of the version's files as they are now (equal to its own while they
    have not changed since it was registered); empty when they can no longer be listed."""
    uris = {split: getattr(dataset, f"{split}_uri") for split in SPLITS}
    try:
        return shards_fingerprint(splits={
            split: (uri, [] if uri_scheme(uri) else [Path(p) for p in local_shards(uri=uri)])
            for split, uri in uris.items()
        })
    except OSError:
        return ""
