"""Derived environment images under docker/podman: the base image, what the harness lacks and
the pinned packages, built once per node through the engine's build API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker.errors import NotFound
from docker.types import Ulimit

from training.errors import EnvironmentBuildFailed
from training.isolation.container_settings import ContainerSettings
from training.isolation.containers import containers_reap
from training.isolation.images import (
    DERIVED_REPOSITORY,
    LABEL_ENVIRONMENT,
    LOCK_DIR,
    image_derive,
    image_key,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(podman_engine: str) -> Iterator[ContainerSettings]:
    settings = ContainerSettings(engine_url=podman_engine, node="images-test", oci_runtime="runc")
    yield settings
    containers_reap(settings=settings)


def _python(settings: ContainerSettings, image: str, code: str) -> tuple[int, str]:
    container = settings.client().containers.run(
        image, ["python3", "-c", code], detach=True, runtime="runc", network_mode="none",
        labels={"tfplatform.node": settings.node},
        ulimits=[Ulimit(name=n, soft=4096, hard=4096) for n in ("nofile", "nproc")],
    )
    try:
        status = container.wait()["StatusCode"]
        return status, container.logs().decode()
    finally:
        container.remove(force=True)


def test_the_image_gets_its_packages_and_what_confines_a_task(
    engine: ContainerSettings, python_image: str, tmp_path: Path
) -> None:
    packages = ["pyjokes==0.8.3"]
    key = image_key(settings=engine, base=python_image, packages=packages)
    with contextlib.suppress(NotFound):  # an earlier run's: this one builds it again
        engine.client().images.remove(f"{DERIVED_REPOSITORY}:{key}", force=True)
    python = image_derive(settings=engine, base=python_image, packages=packages, key=key,
                          log_path=tmp_path / "build.log")

    assert python.image == f"{DERIVED_REPOSITORY}:{key}" and python.executable == "python3"
    assert engine.client().images.get(python.image).labels[LABEL_ENVIRONMENT] == key
    status, output = _python(engine, python.image,
                             "import importlib.metadata, pyjokes, landlockpy; "
                             "print('imported', importlib.metadata.version('pyjokes'))")
    assert (status, output.strip()) == (0, "imported 0.8.3")
    # Without TensorFlow in the base, tf-keras and scikit-learn are not added (nothing to train).
    absent = "import importlib.util as u; print(u.find_spec('tf_keras'), u.find_spec('sklearn'))"
    assert _python(engine, python.image, absent) == (0, "None None\n")
    # (Not pip's own lines in the log: the engine may reuse the install step's cached layer.)
    assert "Successfully tagged" in (tmp_path / "build.log").read_text()
    # The closure was installed by hash from its lock, which stays in the image: every line one
    # exact version with its sha256, and those versions are what the image has.
    read_lock = f"print(open('{LOCK_DIR}/requirements.lock').read())"
    status, lock = _python(engine, python.image, read_lock)
    entries = dict(line.split(" --hash=sha256:") for line in lock.split("\n") if line.strip())
    assert status == 0 and "pyjokes==0.8.3" in entries and any(
        name.startswith("landlockpy==") for name in entries)
    assert all(len(digest) == 64 for digest in entries.values())
    versions = ("import importlib.metadata as m; print(sorted(f'{d.name.lower()}=={d.version}' "
                "for d in m.distributions()))")
    installed = _python(engine, python.image, versions)[1]
    assert all(name.lower() in installed for name in entries)
    # The base stays as it was; the same request is the same image, another pin another one.
    assert _python(engine, python_image, "import pyjokes")[0] != 0
    assert image_key(settings=engine, base=python_image, packages=packages) == key
    assert image_key(settings=engine, base=python_image, packages=["pyjokes==0.8.2"]) != key


def test_a_build_that_fails_says_why(
    engine: ContainerSettings, python_image: str, tmp_path: Path
) -> None:
    packages = ["pyjokes==99.0.0"]
    key = image_key(settings=engine, base=python_image, packages=packages)
    with pytest.raises(EnvironmentBuildFailed) as failed:
        image_derive(settings=engine, base=python_image, packages=packages, key=key,
                     log_path=tmp_path / "build.log")
    assert "No matching distribution found for pyjokes==99.0.0" in failed.value.log_tail


def test_a_base_image_the_node_cannot_get_is_a_clear_failure(engine: ContainerSettings) -> None:
    with pytest.raises(EnvironmentBuildFailed) as failed:
        image_key(settings=engine, base="localhost/no-such-image:1", packages=[])
    assert "is not on node images-test and could not be pulled" in str(failed.value)
