"""How `make test` spreads the suite over its xdist workers.

`--dist loadgroup` alone sends every test without an `xdist_group` to whichever worker is free,
so a module's fixtures (a worker node, a stack, the trainings its tests check) were made again
on every worker its tests landed on: measured, up to four times the CPU of the module alone.
Here a test without a group goes with its module, and a group (tests that share something of
the machine's, tests/conftest.py) stays one unit. The units start longest first, as far as the
collection can tell: the groups, then the modules marked slow, then the rest."""

import re

import pytest

# The suffix loadgroup puts on a grouped test's id (`…::test_x[param]@podman`); pytest 9 may
# render a parametrized one with the bracket after it (`…[param]@podman]`).
GROUP_SUFFIX = re.compile(r"@(\w+)\]?$")


def _unit_of(nodeid: str) -> str:
    grouped = GROUP_SUFFIX.search(nodeid)
    return f"@{grouped.group(1)}" if grouped else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(nodeid)

    # The units go out in collection order (pytest_collection_modifyitems below), not by size.
    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("xdist_group"):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    # By module, and stable: a module's tests keep the order pytest gave them (it orders them
    # to set up each fixture once), and every worker sorts alike.
    module_rank: dict[object, int] = {}
    for item in items:
        module_rank[item.path] = min(module_rank.get(item.path, 2), rank(item))
    items.sort(key=lambda item: module_rank[item.path])
