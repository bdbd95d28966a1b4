"""Node pools, labels and GPU types: what a node says it is, checked, and which nodes a request
for a pool or a GPU type may use. Plain values; the scheduler and submission both use these.

A pool is a name like a DNS label (`a100`, `team-b`), as Kubernetes node pools and Run:ai's
are; every node is in one (`default` unless configured). A GPU type is NVML's name for the
node's GPUs ("NVIDIA A100-SXM4-80GB") or one configured; it is matched without regard to case.
"""

import re
from collections.abc import Iterable, Mapping

from tfplatform.core.errors import InvalidInput

DEFAULT_POOL = "default"
# A Spark cluster's pool (SparkCluster.pool): it takes only the experiments that ask for it.
SPARK_POOL_PREFIX = "spark-"
POOL_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_KEY_PATTERN = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_./]{0,61}[A-Za-z0-9])?")
LABEL_VALUE_MAX = 63
GPU_TYPE_MAX = 100


def pool_check(*, pool: str, field: str = "pool") -> str:
    if not POOL_PATTERN.fullmatch(pool):
        raise InvalidInput(
            f"{pool[:70]!r} is not a pool name: lowercase letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit.", field=field)
    return pool


def labels_parse(*, items: Iterable[str]) -> dict[str, str]:
    """`key=value` items (PLATFORM_NODE_LABELS) as a dict; a malformed one is refused."""
    labels = {}
    for item in items:
        key, sep, value = item.strip().partition("=")
        if not sep or not LABEL_KEY_PATTERN.fullmatch(key) or len(value) > LABEL_VALUE_MAX:
            raise InvalidInput(f"Node label {item[:80]!r} is not `key=value` (a key of letters, "
                               "digits, '-', '_', '.', '/'; a value of at most 63 characters).",
                               field="labels")
        labels[key] = value
    return labels


def gpu_type_choose(*, configured: str, discovered: list[str]) -> str:
    """The node's GPU type: the configured one, else NVML's name of its first GPU, else none."""
    chosen = configured.strip() or (discovered[0].strip() if discovered else "")
    return chosen[:GPU_TYPE_MAX]


def pool_dedicated(*, pool: str) -> bool:
    """Whether only requests that name the pool may use it (a Spark cluster's)."""
    return pool.startswith(SPARK_POOL_PREFIX)


def nodes_eligible(
    *, pool: str, gpu_type: str, node_pools: Mapping[int, str], node_gpu_types: Mapping[int, str]
) -> frozenset[int] | None:
    """The nodes a request may use; None when it asks for neither and no pool is dedicated
    (every node)."""
    if not pool and not gpu_type and not any(
            pool_dedicated(pool=node_pool) for node_pool in node_pools.values()):
        return None
    wanted = gpu_type.casefold()
    return frozenset(
        node for node, node_pool in node_pools.items()
        if (node_pool == pool if pool else not pool_dedicated(pool=node_pool))
        and (not wanted or node_gpu_types.get(node, "").casefold() == wanted)
    )


def where_text(*, pool: str, gpu_type: str) -> str:
    """How a pending reason names the nodes a request is limited to."""
    parts = ([f"pool '{pool}'"] if pool else []) + ([f"GPU type '{gpu_type}'"] if gpu_type else [])
    return " and ".join(parts)
