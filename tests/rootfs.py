"""Images from a root filesystem assembled here (debootstrap): no registry can be pulled from."""

import subprocess
from pathlib import Path


def rootfs_import(*, root: Path, tag: str) -> None:
    """The folder `root` as the engine's image `tag`."""
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["podman", "import", "-", tag], stdin=tar.stdout, check=True,
                   capture_output=True, timeout=900)
    assert tar.wait() == 0


def image_exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag], check=False).returncode == 0
