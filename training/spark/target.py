"""A Spark cluster as the platform describes it to a trial's driver: plain values, no pyspark.

    SparkTarget(master="spark://head:7077", conf={"spark.executor.memory": "4g"}, ...)
    spark_master_check(master=...)  # InvalidInput unless it is a master Spark takes
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from training.errors import InvalidInput

_LOCAL = re.compile(r"local(\[(\d{1,3}|\*)(,\d{1,2})?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\d{1,3},\d{1,3},\d{1,7}\]")
_STANDALONE = re.compile(r"spark://[A-Za-z0-9.-]{1,253}:\d{1,5}(,[A-Za-z0-9.-]{1,253}:\d{1,5})*")
_KUBERNETES = re.compile(r"k8s://https?://[A-Za-z0-9.-]{1,253}(:\d{1,5})?")
CONF_KEY = re.compile(r"spark\.[A-Za-z0-9._-]{1,200}")
CONF_VALUE_MAX = 2000
CONF_ITEMS_MAX = 200
# Set by the platform for every trial: a cluster's configuration may not change them.
CONF_OWNED = frozenset({
    "spark.app.name", "spark.master", "spark.submit.deployMode",
    "spark.stage.maxConsecutiveAttempts", "spark.task.cpus", "spark.task.resource.gpu.amount",
})
# Spark's own retries of a failed barrier stage before the trial fails: each resumes from
# the trial's last checkpoint.
STAGE_ATTEMPTS_DEFAULT = 4
PORT_BASE_DEFAULT, PORT_SPAN_DEFAULT = 28000, 4000
# The hyperparameter whose Spark SQL query is the trial's input, read on the cluster (feed.py).
QUERY_HYPERPARAMETER = "spark_query"


def spark_master_check(*, master: str) -> str:
    master = master.strip()
    if master == "yarn" or any(p.fullmatch(master) for p in
                               (_LOCAL, _LOCAL_CLUSTER, _STANDALONE, _KUBERNETES)):
        return master
    raise InvalidInput(
        f"{master[:100]!r} is not a Spark master: local[N], local-cluster[W,C,M], "
        "spark://HOST:PORT, yarn or k8s://https://HOST:PORT.")


def spark_conf_check(*, conf: Any) -> dict[str, str]:
    if not isinstance(conf, dict):
        raise InvalidInput("The Spark configuration is an object of `spark.*` keys to strings.")
    if len(conf) > CONF_ITEMS_MAX:
        raise InvalidInput(f"At most {CONF_ITEMS_MAX} Spark settings.")
    checked = {}
    for key, value in conf.items():
        if not isinstance(key, str) or not CONF_KEY.fullmatch(key):
            raise InvalidInput(f"{str(key)[:80]!r} is not a Spark setting (spark.…).")
        if key in CONF_OWNED:
            raise InvalidInput(f"{key} is set by the platform for each trial.")
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float) or len(str(value)) > CONF_VALUE_MAX:
            raise InvalidInput(
                f"{key}: a value is a string of at most {CONF_VALUE_MAX} characters.")
        if "\x00" in str(value):
            raise InvalidInput(f"{key}: a value may not hold a NUL character.")
        checked[key] = str(value)
    return checked


def master_is_local(*, master: str) -> bool:
    """Whether the executors run on the node's own machine, which is then the cluster."""
    return master.startswith("local")


@dataclass(frozen=True)
class SparkTarget:
    name: str
    master: str
    conf: dict[str, str] = field(default_factory=dict)
    # Where the tasks reach the supervisor's channel: this node's address as the executors see it.
    channel_host: str = "127.0.0.1"
    python: str = ""  # the executors' Python, for the trial process; "" the driver's own
    stage_attempts: int = STAGE_ATTEMPTS_DEFAULT
    # Where a task's TF server listens on its executor: below the kernel's ephemeral range
    # (32768+ on Linux), whose ports an outgoing connection may take between a task's choice
    # and TensorFlow's bind, which comes seconds later (its import).
    port_base: int = PORT_BASE_DEFAULT
    port_span: int = PORT_SPAN_DEFAULT

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "master": self.master, "conf": dict(self.conf),
                "channel_host": self.channel_host, "python": self.python,
                "stage_attempts": self.stage_attempts, "port_base": self.port_base,
                "port_span": self.port_span}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SparkTarget:
        return cls(name=str(data["name"]), master=str(data["master"]),
                   conf={str(k): str(v) for k, v in dict(data.get("conf", {})).items()},
                   channel_host=str(data.get("channel_host", "127.0.0.1")),
                   python=str(data.get("python", "")),
                   stage_attempts=int(data.get("stage_attempts", STAGE_ATTEMPTS_DEFAULT)),
                   port_base=int(data.get("port_base", PORT_BASE_DEFAULT)),
                   port_span=int(data.get("port_span", PORT_SPAN_DEFAULT)))
