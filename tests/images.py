"""The suite's container images, built before it starts: `make test-images` (`make pytest` runs it).

On a fresh machine these builds are most of the suite's first run: a debootstrap root, pip
installing TensorFlow into a derived image, the compose stack. Inside the suite they competed
with every other test for two cores and ran into the tests' time limits; here they run alone,
one after the other. Each is tagged by the hash of its recipe, so a machine builds it once and
every later run (and every test, on any xdist worker) finds it."""

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.rootfs import image_exists, rootfs_import

# An image with its own Python (Debian's, with pip) and no TensorFlow.
PYTHON_ROOTFS = ["debootstrap", "--variant=minbase", "--include=python3,python3-pip", "bookworm"]
PYTHON_IMAGE = "localhost/tfplatform-test-python:" + hashlib.sha256(
    json.dumps(PYTHON_ROOTFS).encode()).hexdigest()[:12]
# What the derived build installs into PYTHON_IMAGE: what trains, and JupyterLab for a
# workspace; the tests that use it share the one build.
OWN_PYTHON_PACKAGES = ["scikit-learn==1.9.1", "tensorflow==2.21.0", "tf-keras==2.21.0",
                       "jupyterlab==4.6.6"]
TOOLS = ("podman", "debootstrap")


def tools_missing() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def python_image_ensure() -> str:
    if image_exists(PYTHON_IMAGE):
        return PYTHON_IMAGE
    with tempfile.TemporaryDirectory(prefix="tfp-python-rootfs-") as folder:
        root = Path(folder) / "root"
        subprocess.run([*PYTHON_ROOTFS, str(root), "http://deb.debian.org/debian"],
                       check=True, capture_output=True, timeout=900)
        rootfs_import(root=root, tag=PYTHON_IMAGE)
    return PYTHON_IMAGE


@contextmanager
def podman_service(*, folder: Path) -> Iterator[str]:
    """The machine's podman engine behind an API socket of its own in `folder`."""
    socket_path = folder / "podman.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not socket_path.exists():
            raise RuntimeError("podman system service did not start")
        yield f"unix://{socket_path}"
    finally:
        service.terminate()
        service.wait(timeout=30)


def _derived_ensure() -> None:
    from training.isolation.container_settings import ContainerSettings
    from training.isolation.containers import runtime_image_ensure
    from training.isolation.images import image_derive, image_key

    with tempfile.TemporaryDirectory(prefix="tfp-images-") as name:
        folder = Path(name)
        with podman_service(folder=folder) as url:
            settings = ContainerSettings(engine_url=url, node="test-images", oci_runtime="runc")
            runtime_image_ensure(settings=settings)
            key = image_key(settings=settings, base=PYTHON_IMAGE, packages=OWN_PYTHON_PACKAGES)
            image_derive(settings=settings, base=PYTHON_IMAGE, packages=OWN_PYTHON_PACKAGES,
                         key=key, log_path=folder / "build.log")


def main() -> int:
    if missing := tools_missing():
        print(f"no {' or '.join(missing)}: the container tests will skip (`make containers`)")
        # Under CI they fail instead: conftest's podman_engine and python_image say so.
        return 0
    from tests.deploy.compose_images import images_build

    for step in (python_image_ensure, _derived_ensure, images_build):
        start = time.monotonic()
        step()
        print(f"test images: {step.__name__} {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
