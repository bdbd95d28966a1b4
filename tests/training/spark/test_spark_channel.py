"""The channel a barrier task's events come home by: only the trial's own tasks, each proved by
its attempt's HMAC, are heard; lines are bounded."""

import socket
import time

import pytest

from training.errors import InvalidInput
from training.spark.channel import LINE_MAX, ChannelListener, Received, channel_open, task_token
from training.spark.target import spark_conf_check, spark_master_check

KEY = b"k" * 32


def _drain(listener: ChannelListener, *, until: int) -> list[Received]:
    found: list[Received] = []
    deadline = time.monotonic() + 10
    while len(found) < until and time.monotonic() < deadline:
        found += listener.drain()
        time.sleep(0.02)
    return found


def test_a_task_with_its_token_is_heard_in_order() -> None:
    listener = ChannelListener(host="127.0.0.1", key=KEY, trial_id="7", tasks={"worker:0"})
    sender = channel_open(address=f"127.0.0.1:{listener.port}", trial_id="7", task="worker:0",
                          attempt="3", token=task_token(key=KEY, trial_id="7", task="worker:0",
                                                        attempt="3"))
    sender.event(b'{"kind": "metric"}')
    sender.output(b"x" * (LINE_MAX + 500))
    sender.exit(0)
    sender.close()
    found = _drain(listener, until=4)
    listener.close()
    assert [(r.task, r.attempt, r.kind) for r in found] == [
        ("worker:0", "3", "event"), ("worker:0", "3", "output"), ("worker:0", "3", "exit"),
        ("worker:0", "3", "closed")]
    assert len(found[1].data) == LINE_MAX and found[2].data == "0"


@pytest.mark.parametrize(("trial", "task", "attempt", "signed_as"), [
    ("7", "worker:0", "3", ("7", "worker:0", "4")),  # another attempt's token
    ("7", "worker:1", "3", ("7", "worker:0", "3")),  # another task's token
    ("8", "worker:0", "3", ("8", "worker:0", "3")),  # another trial
    ("7", "worker:5", "3", ("7", "worker:5", "3")),  # a task the trial does not have
])
def test_anyone_else_is_closed_unheard(trial: str, task: str, attempt: str,
                                       signed_as: tuple[str, str, str]) -> None:
    listener = ChannelListener(host="127.0.0.1", key=KEY, trial_id="7",
                               tasks={"worker:0", "worker:1"})
    token = task_token(key=KEY, trial_id=signed_as[0], task=signed_as[1], attempt=signed_as[2])
    sender = channel_open(address=f"127.0.0.1:{listener.port}", trial_id=trial, task=task,
                          attempt=attempt, token=token)
    sender.event(b'{"kind": "metric"}')
    sender.close()
    deadline = time.monotonic() + 10
    while not listener.refused and time.monotonic() < deadline:
        time.sleep(0.02)
    assert listener.refused == 1 and listener.drain() == []
    listener.close()


def test_garbage_instead_of_a_greeting_is_refused() -> None:
    listener = ChannelListener(host="127.0.0.1", key=KEY, trial_id="7", tasks={"worker:0"})
    with socket.create_connection(("127.0.0.1", listener.port)) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n")
    deadline = time.monotonic() + 10
    while not listener.refused and time.monotonic() < deadline:
        time.sleep(0.02)
    assert listener.refused == 1 and listener.drain() == []
    listener.close()


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]",
                                    "local-cluster[2,1,1024]", "spark://head:7077",
                                    "spark://a:7077,b:7077", "yarn", "k8s://https://k8s:6443"])
def test_masters_spark_takes(master: str) -> None:
    assert spark_master_check(master=master) == master


@pytest.mark.parametrize("master", ["", "http://evil", "local[2]; rm -rf /", "spark://",
                                    "mesos://x:5050", "yarn-client"])
def test_other_masters_are_refused(master: str) -> None:
    with pytest.raises(InvalidInput):
        spark_master_check(master=master)


@pytest.mark.parametrize("conf", [{"spark.master": "local"}, {"hadoop.x": "1"},
                                  {"spark.x": "a" * 2001}, {"spark.x": "a\x00"},
                                  {"spark.x": ["list"]}, "not a dict"])
def test_configuration_the_platform_owns_or_that_is_malformed_is_refused(conf: object) -> None:
    with pytest.raises(InvalidInput):
        spark_conf_check(conf=conf)
