"""`tfp usage` against a live server: the hours of allocation records with known devices ×
seconds in the table, the JSON and the CSV (as the API sends it); nobody sees another's; bad
dates and groupings are the API's field errors."""

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import PASSWORD, DeviceFactory, ExperimentFactory, NodeFactory, UserFactory
from tests.tfplatform.experiments.usage.test_usage import hold
from tests.tfplatform_cli.conftest import TFP, TIMEOUT, Tfp
from tests.tfplatform_cli.test_search_cli import signed_in
from tfplatform.accounts.models import User
from tfplatform.cluster.services import allocations_utilization_record
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db(transaction=True)

DAYS = ("--from", "2026-03-01", "--to", "2026-03-02")
START = datetime(2026, 3, 1, 10, tzinfo=UTC)


def rows(output: str) -> list[list[str]]:
    """The table's cells, up to the blank line before its note."""
    return [line.split() for line in output.split("\n\n")[0].splitlines()]


@pytest.fixture
def usage() -> dict[str, Any]:
    """alice: 4 emulated GPU-hours and 1 CPU-slot-hour on the 1st (experiment "resnet"), and a
    measured GPU (80 % mean) from 23:00 to 01:00 (experiment "bert"); bob: 5 GPU-hours on the
    1st and a GPU still held since noon on the 2nd (12 h of the window)."""
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    node = NodeFactory()
    gpus = [DeviceFactory(node=node, kind="gpu", index=i) for i in range(3)]
    cpu = DeviceFactory(node=node, kind="cpu", index=0)
    resnet = ExperimentFactory(owner=alice, name="resnet")
    for device in (gpus[0], gpus[1], cpu):
        hours = 1 if device is cpu else 2
        hold(resnet, device, start=START, end=START + timedelta(hours=hours))

    measured = DeviceFactory(node=node, kind="gpu", index=3, emulated=False, name="NVIDIA A100")
    bert = ExperimentFactory(owner=alice, name="bert")
    late = datetime(2026, 3, 1, 23, tzinfo=UTC)
    allocation = hold(bert, measured, start=late, end=None)
    for minute, percent in enumerate([80.0, 60.0, 100.0]):
        allocations_utilization_record(node=node, percents={3: percent},
                                       at=late + timedelta(minutes=minute))
    allocation.released_at = late + timedelta(hours=2)
    allocation.save()

    theirs = ExperimentFactory(owner=bob, name="bobs")
    hold(theirs, gpus[2], start=START, end=START + timedelta(hours=5))
    hold(ExperimentFactory(owner=bob), gpus[0], start=datetime(2026, 3, 2, 12, tzinfo=UTC),
         end=None)
    return {"alice": alice, "resnet": resnet, "bert": bert, "bobs": theirs}


def logged_in(tfp: Callable[[str], Tfp], server: str, name: str) -> Tfp:
    user = tfp(name)
    done = user("login", "--server", server, "--username", name, "--password-stdin",
                stdin=PASSWORD)
    assert done.returncode == 0, done.stderr
    return user


def test_usage_shows_ones_own_hours_as_a_table_json_and_the_apis_csv(
    live_server: Any, tfp: Callable[[str], Tfp], usage: dict[str, Any]
) -> None:
    alice = logged_in(tfp, live_server.url, "alice")
    shown = alice("usage", *DAYS)
    assert shown.returncode == 0, shown.stderr
    # 4 emulated + 2 measured GPU-hours; utilization is the mean over the measured time only.
    assert rows(shown.stdout) == [
        ["USER", "GPU-HOURS", "CPU-SLOT-HOURS", "GPU-UTIL", "ALLOCATIONS", "RUNNING"],
        ["alice", "6.000", "1.000", "80%", "4", "-"],
        ["total", "6.000", "1.000", "80%", "4", "-"],
    ]
    assert shown.stdout.endswith("\n\n2026-03-01 to 2026-03-02 (UTC days); GPU-UTIL: mean "
                                 "measured (NVML) utilization, - where not measured\n")

    resnet, bert = usage["resnet"].pk, usage["bert"].pk
    by_day = alice("usage", *DAYS, "--by", "experiment,day")
    assert rows(by_day.stdout) == [
        ["EXPERIMENT", "NAME", "DAY", "GPU-HOURS", "CPU-SLOT-HOURS", "GPU-UTIL", "ALLOCATIONS",
         "RUNNING"],
        [str(resnet), "resnet", "2026-03-01", "4.000", "1.000", "-", "3", "-"],
        [str(bert), "bert", "2026-03-01", "1.000", "0.000", "80%", "1", "-"],
        [str(bert), "bert", "2026-03-02", "1.000", "0.000", "80%", "1", "-"],
        ["total", "6.000", "1.000", "80%", "4", "-"],
    ]
    one = alice("usage", *DAYS, "--experiment", str(resnet), "--group-by", "day")
    assert rows(one.stdout)[1:] == [["2026-03-01", "4.000", "1.000", "-", "3", "-"],
                                    ["total", "4.000", "1.000", "-", "3", "-"]]
    # --since/--until are the same parameters as --from/--to.
    assert alice("usage", "--since", "2026-03-02", "--until", "2026-03-02").stdout.splitlines()[
        1].split() == ["alice", "1.000", "0.000", "80%", "1", "-"]
    assert alice("usage", "--from", "2026-04-01", "--to", "2026-04-02").stdout == (
        "No device was held from 2026-04-01 to 2026-04-02 (UTC days).\n")

    api = APIClient()
    api.force_authenticate(User.objects.get(username="alice"))
    query = "from=2026-03-01&to=2026-03-02&group_by=experiment,day"
    assert json.loads(alice("usage", *DAYS, "--by", "experiment,day", "--json").stdout) == (
        api.get(f"/api/v1/usage/?{query}").json())
    # The CSV as the server sends it, byte for byte (its \r\n line ends too).
    exported = subprocess.run([str(TFP), "usage", *DAYS, "--by", "experiment,day", "--csv"],
                              cwd=alice.home, env=alice.env(), capture_output=True,
                              timeout=TIMEOUT, check=True)
    assert exported.stdout == api.get(f"/api/v1/usage.csv?{query}").content
    assert exported.stdout.startswith(b"experiment,experiment_name,day,gpu_hours,cpu_slot_hours,")
    assert b"\r\n" + f"{bert},bert,2026-03-02,1.0,0.0,".encode() in exported.stdout


def test_nobody_sees_anothers_usage(
    live_server: Any, tfp: Callable[[str], Tfp], usage: dict[str, Any]
) -> None:
    bob = logged_in(tfp, live_server.url, "bob")
    shown = bob("usage", *DAYS)
    assert rows(shown.stdout)[1:] == [["bob", "17.000", "0.000", "-", "2", "running"],
                                      ["total", "17.000", "0.000", "-", "2", "running"]]
    assert "; running: still held, counted up to now\n" in shown.stdout
    assert "alice" not in shown.stdout and "resnet" not in bob("usage", *DAYS, "--csv").stdout
    # Naming alice or her experiment is "not found", as her objects are.
    for args, error in ((("--user", "alice"), "User not found."),
                        (("--experiment", str(usage["resnet"].pk)), "Experiment not found.")):
        refused = bob("usage", *DAYS, *args)
        assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", f"error: {error}\n")

    carol = signed_in(tfp, live_server.url, "carol")
    assert carol("usage", *DAYS).stdout.startswith("No device was held from 2026-03-01 to")
    assert Experiment.objects.filter(owner__username="carol").count() == 0


def test_bad_dates_and_groupings_are_the_apis_field_errors(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    erin = signed_in(tfp, live_server.url, "erin")

    def refused(*args: str) -> str:
        result = erin("usage", *args)
        assert (result.returncode, result.stdout) == (1, ""), result.stderr
        return result.stderr

    assert refused("--since", "yesterday") == (
        "error: Invalid input.\n  from: Date has wrong format. Use one of these formats "
        "instead: YYYY-MM-DD.\n")
    assert refused("--from", "2026-03-05", "--to", "2026-03-01") == (
        "error: from: 'from' must not be after 'to'.\n")
    assert refused("--from", "2024-01-01", "--to", "2026-01-01") == (
        "error: from: Ask for at most 366 days at once.\n")
    assert refused("--by", "owner") == (
        "error: group_by: group_by takes one or more of user, team, experiment, day.\n")
    assert refused("--until", "") == "error: Invalid input.\n  to: This field may not be blank.\n"
    # Wrong usage of the command itself is exit 2, as everywhere in tfp.
    for args in (("--experiment", "x"), ("--csv", "--json"), ("--by",)):
        assert erin("usage", *args).returncode == 2, args
