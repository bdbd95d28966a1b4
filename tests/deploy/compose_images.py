"""The images the compose test starts, built here: no registry can be pulled from.

A Debian root filesystem (debootstrap) with Debian's PostgreSQL, Redis, Caddy and Prometheus, and
this machine's CPython 3.11 in /usr/local, as python:3.11-slim has it (Debian's own 3.11.2 is
older than the pinned packages allow). Its tag is the hash of what it is made of, so the engine
keeps one per recipe: built once on a machine, found by every later run. The services' images
are small layers on it (compose/images/), the app image is the Dockerfile with it as BASE."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.rootfs import image_exists, rootfs_import

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = Path(__file__).resolve().parent / "compose"
# This machine's podman refuses the engine's default rlimits: every build and container gets these.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
# What CPython's own extension modules link against, and the services' packages.
PACKAGES = [
    "ca-certificates", "libbz2-1.0", "libexpat1", "libffi8", "liblzma5", "libncursesw6",
    "libnsl2", "libreadline8", "libsqlite3-0", "libssl3", "libtirpc3", "libuuid1", "zlib1g",
    "bubblewrap", "postgresql-15", "redis-server", "caddy", "wget", "prometheus",
]
ROOTFS = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm"]
# A TLS-inspecting proxy's certificate authorities, where the machine has one: the app image's
# build downloads its packages through it.
MACHINE_CAS = Path("/usr/local/share/ca-certificates")
SERVICES = ("postgres", "redis", "caddy", "prometheus")
APP_IMAGE = "localhost/tfplatform-compose-app:test"


def tools_or_skip() -> None:
    from tests.images import tools_missing

    if not (missing := tools_missing()):
        return
    message = f"the compose test needs {' and '.join(missing)} (`make containers`)"
    if os.environ.get("CI"):
        pytest.fail(f"CI needs {message}")
    pytest.skip(message)


def images_build() -> dict[str, str]:
    """Every image the override names, by service ("app" for the platform's own)."""
    base = _base_ensure()
    images = {name: _service_ensure(name=name, base=base) for name in SERVICES}
    # Built every run: its layers up to the requirements are cached by podman, and the last
    # ones are this checkout's code.
    _podman("build", *LIMITS, "--build-arg", f"BASE={base}", "-t", APP_IMAGE, str(ROOT),
            timeout=1500)
    return {**images, "app": APP_IMAGE}


def _base_ensure() -> str:
    python = Path(sys.base_prefix)
    cas = sorted(MACHINE_CAS.glob("*.crt")) if MACHINE_CAS.is_dir() else []
    recipe = {"rootfs": ROOTFS, "python": [sys.version, str(python)],
              "cas": {ca.name: hashlib.sha256(ca.read_bytes()).hexdigest() for ca in cas}}
    tag = "localhost/tfplatform-compose-base:" + _digest(json.dumps(recipe, sort_keys=True))
    if image_exists(tag):
        return tag
    assert sys.version_info >= (3, 11, 5), "the pinned packages need CPython 3.11.5 or later"
    root = Path(tempfile.mkdtemp(prefix="tfp-compose-rootfs-"))
    try:
        subprocess.run([*ROOTFS, str(root), "http://deb.debian.org/debian"], check=True,
                       capture_output=True, timeout=1200)
        for ca in cas:
            shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
        subprocess.run(["chroot", str(root), "update-ca-certificates"], check=True,
                       capture_output=True, timeout=120)
        _python_copy(python=python, root=root)
        rootfs_import(root=root, tag=tag)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tag


def _python_copy(*, python: Path, root: Path) -> None:
    """CPython as python:3.11-slim has it: in /usr/local, with its standard library only."""
    local = root / "usr/local"
    (local / "bin").mkdir(parents=True, exist_ok=True)
    (local / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copy2(python / "bin/python3.11", local / "bin/python3.11")
    for name in ("python3", "python"):
        (local / "bin" / name).symlink_to("python3.11")
    for library in (python / "lib").glob("libpython3.11.so*"):
        shutil.copy2(library, local / "lib" / library.name, follow_symlinks=False)
    shutil.copytree(python / "lib/python3.11", local / "lib/python3.11", symlinks=True,
                    ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter",
                                                  "turtledemo"))
    (local / "lib/python3.11/site-packages").mkdir()
    subprocess.run(["chroot", str(root), "ldconfig"], check=True, capture_output=True,
                   timeout=60)


def _service_ensure(*, name: str, base: str) -> str:
    context = COMPOSE_DIR / "images" / name
    content = [base] + [f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()}"
                        for path in sorted(context.iterdir())]
    tag = f"localhost/tfplatform-compose-{name}:" + _digest(json.dumps(content))
    if not image_exists(tag):
        _podman("build", *LIMITS, "--build-arg", f"BASE={base}", "-t", tag, str(context),
                timeout=600)
    return tag


def _podman(*args: str, timeout: float) -> None:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, (
        f"podman {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
