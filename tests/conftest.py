"""Shared fixtures. Tests use the real database, broker and processes, never mocks of ours."""

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.apps import apps
from django.core.cache import cache
from rest_framework.test import APIClient

# Live processes (a worker node, the model server) for every folder's tests, how xdist spreads
# them, and the one way a test overrides the platform's settings.
pytest_plugins = ["tests.plugins.live", "tests.plugins.xdist_modules", "tests.fixtures_settings"]

ROOT = Path(__file__).resolve().parents[1]
# The migration that seeds rows (the default environments): _seeded_rows puts them back.
SEEDING_MIGRATION = importlib.import_module(
    "tfplatform.experiments.migrations.0002_default_environments")
PEER_DATA = ROOT.parent / "shared" / "peer-data"

# Under xdist (`make test`), tests that share something of the machine's beyond what each worker
# has of its own (its database, var folder, broker and cache keys) run on one worker, one after
# the other: those named here by fixture, others by their module's `xdist_group` mark
# (every other test goes with its module: tests/plugins/xdist_modules.py). The
# podman engine's storage is the machine's, so its tests run in two groups that touch
# different parts of it: `podman_images` builds the Python image from debootstrap and the
# images derived from it (one build each, shared by the group's tests, a long first run on
# a fresh machine); `podman` runs trials in containers on the node's runtime image (a build
# either group may make: the same tiny image) and their gang networks (a node prunes only
# old unused ones). The first fixture named here that a test uses picks its group.
XDIST_GROUPS_BY_FIXTURE = {"python_image": "podman_images", "podman_engine": "podman"}
# The benchmarks' tests measure (timings, a Redis database of their own, BENCH_REDIS_URL).
XDIST_GROUPS_BY_FOLDER = {ROOT / "tests" / "bench": "bench"}


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.get_closest_marker("xdist_group"):
        return
    groups = [group for fixture, group in XDIST_GROUPS_BY_FIXTURE.items()
              if fixture in getattr(item, "fixturenames", ())]
    groups += [group for folder, group in XDIST_GROUPS_BY_FOLDER.items()
               if item.path.is_relative_to(folder)]
    if groups:
        item.add_marker(pytest.mark.xdist_group(groups[0]))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # --dist loadgroup sends the tests whose ids end in the same "@group" to one worker.
    # pytest-xdist 3.8 appends it to item._nodeid, which pytest 9 no longer reads (an item's
    # id is item._id): appended here, where xdist has not already.
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and hasattr(item, "_id") and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)


def peer_data_or_skip() -> Path:
    """Peer data is required in CI; on a developer machine without it the test skips."""
    if PEER_DATA.is_dir():
        return PEER_DATA
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the peer data at {PEER_DATA}")
    pytest.skip(f"peer data not found at {PEER_DATA}")


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    # Throttle counters live in the cache, checked tokens and model routes in per-process
    # caches; each test starts with a clean slate.
    from tfplatform.accounts.token_cache import token_cache_clear
    from tfplatform.modelregistry.selectors.routes import model_route_cache_clear

    for clear in (cache_clear, token_cache_clear, model_route_cache_clear):
        clear()
    yield
    for clear in (cache_clear, token_cache_clear, model_route_cache_clear):
        clear()


@pytest.fixture(autouse=True)
def _seeded_rows(request: pytest.FixtureRequest) -> None:
    """A test in a transaction sees the database as migrations left it, seeded rows included
    (the default environments), whichever tests ran on its worker before: a transactional
    test's flush removes them. Transactional tests make what they need themselves."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None or marker.kwargs.get("transaction") or (marker.args and marker.args[0]):
        return
    request.getfixturevalue("db")
    SEEDING_MIGRATION.create_defaults(apps, None)


def cache_clear() -> None:
    """This process's cache keys. Django's clear() of a Redis cache empties the whole database,
    which xdist's workers share (each with its own KEY_PREFIX): another worker's test would
    lose its throttle counters halfway; so under a prefix only the keys under it go."""
    prefix = cache.key_prefix
    client_of = getattr(getattr(cache, "_cache", None), "get_client", None)
    if not prefix or client_of is None:
        cache.clear()
        return
    client = client_of(write=True)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture(scope="session")
def podman_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Podman's Docker-compatible API on a socket of the test run's own: the engine the
    `podman` trial runtime talks to. `make test` installs podman (as root); CI must have it."""
    import shutil

    from tests.images import podman_service

    if shutil.which("podman") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs podman for the container runtime tests (`make containers`)")
        pytest.skip("podman is not installed (`make containers` installs it)")
    with podman_service(folder=tmp_path_factory.mktemp("podman")) as url:
        yield url


@pytest.fixture(scope="session")
def python_image(podman_engine: str) -> str:
    """An image with its own Python (Debian's, with pip) and no TensorFlow, built from a root
    filesystem debootstrap assembles (no registry can be pulled from): by `make test-images`
    before the suite, here only where a run skipped that."""
    import shutil

    from tests.images import PYTHON_IMAGE, python_image_ensure
    from tests.rootfs import image_exists

    if not image_exists(PYTHON_IMAGE) and shutil.which("debootstrap") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs debootstrap for the derived-image tests (`make containers`)")
        pytest.skip("debootstrap is not installed (`make containers` installs it)")
    return python_image_ensure()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path, for Unix sockets (108 bytes at most): tmp_path is too deep
    under xdist (`…/pytest-51/popen-gw0/test_a_long_name_0/`)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="tfp-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
