"""Environments: the node's runtime plus pinned pip packages, as a venv built once per node.

    pinned = environment_packages_validate(packages=["pyjokes==0.8.3"])
    python = environment_prepare(packages=pinned, root=Path("var/environments"),
                                 log_path=Path("var/environments/build.log"))
    python.executable    # <root>/<key>/bin/python: its own packages first, then the node's

The venv does not copy the node's runtime. A venv made from a venv sees the *base* interpreter's
site-packages, not the node's, so a `.pth` file appends the node's site dirs after its own: the
environment's packages win and TensorFlow comes from the node. It is built under a file lock, so
trials starting at once on one node build it once, and is complete only once its marker exists.
Packages are installed as wheels only: building an sdist runs its code on the node, outside any
sandbox. The closure is resolved first, then installed with `--require-hashes` from the lock
that resolution wrote (`requirements.lock` in the venv).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from training.errors import EnvironmentBuildFailed, InvalidInput
from training.isolation.pip_lock import closure_install, lock_requirements
from training.isolation.runtime import TaskPython

KEY_CHARS = 16
MAX_PACKAGES = 100
MAX_REQUIREMENT_CHARS = 200
# Written last: a venv without it is the remains of a build that was cut short.
READY_MARKER = ".ready"
# The environment's whole closure, each wheel by hash (what was installed, for an audit).
LOCK_FILE = "requirements.lock"
NODE_SITE_PTH = "_platform_node_runtime.pth"
BUILD_TIMEOUT_SECONDS = 1800.0
LOG_TAIL_BYTES = 2000
EXAMPLE = "pyjokes==0.8.3"


def environment_packages_validate(*, packages: object) -> list[str]:
    """Pinned requirements, normalized and sorted: `name==version` (extras allowed), from the
    package index only; no URL, path, marker, range or wildcard."""
    if not isinstance(packages, list | tuple) or not all(isinstance(p, str) for p in packages):
        raise InvalidInput(f"Packages must be a list of pinned requirements such as {EXAMPLE!r}.")
    if len(packages) > MAX_PACKAGES:
        raise InvalidInput(f"An environment may pin at most {MAX_PACKAGES} packages.")
    pinned: dict[str, str] = {}
    for entry in packages:
        name, requirement = _pinned(entry)
        if name in pinned:
            raise InvalidInput(f"{name} is listed twice; pin each package once.")
        pinned[name] = requirement
    return sorted(pinned.values())


def _pinned(entry: str) -> tuple[str, str]:
    text = entry.strip()
    if not text or len(text) > MAX_REQUIREMENT_CHARS or text.startswith("-"):
        raise InvalidInput(f"{entry!r} is not a pinned requirement such as {EXAMPLE!r}.")
    try:
        requirement = Requirement(text)
    except InvalidRequirement as error:
        raise InvalidInput(
            f"{entry!r} is not a pinned requirement such as {EXAMPLE!r}: {error}"
        ) from error
    if requirement.url:
        raise InvalidInput(
            f"{entry!r} names a URL or path; packages come from the package index, pinned as "
            "name==version."
        )
    if requirement.marker is not None:
        raise InvalidInput(f"{entry!r} has an environment marker; pin it without one.")
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==":
        raise InvalidInput(
            f"{entry!r} must be pinned to one exact version with ==, e.g. {EXAMPLE!r}."
        )
    try:
        version = Version(specifiers[0].version)
    except InvalidVersion as error:
        raise InvalidInput(f"{entry!r} must name one exact version, not a wildcard.") from error
    name = canonicalize_name(requirement.name)
    extras = sorted(canonicalize_name(extra) for extra in requirement.extras)
    return name, f"{name}[{','.join(extras)}]=={version}" if extras else f"{name}=={version}"


def node_runtime_identity() -> str:
    """What the venvs of this node are layered on: rebuilt when it changes (a TF upgrade)."""
    try:
        tensorflow = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tensorflow = "none"
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"{sys.prefix}; python {python}; tensorflow {tensorflow}"


def environment_key(*, packages: Sequence[str], base: str) -> str:
    pinned = environment_packages_validate(packages=list(packages))
    digest = hashlib.sha256("\n".join([base, "", *pinned]).encode()).hexdigest()
    return digest[:KEY_CHARS]


def environment_built(*, key: str, root: Path) -> bool:
    return (root / key / READY_MARKER).exists()


def environment_python(*, key: str, root: Path) -> TaskPython:
    venv = root.resolve() / key
    return TaskPython(key=key, executable=str(venv / "bin" / "python"), paths=(str(venv),))


def environment_resolved(*, python: TaskPython) -> list[str] | None:
    """The `name==version` of every package an environment's venv installed, as pip resolved
    its closure (its lock); None when `python` is no venv of ours (the node's own runtime, or
    a derived image, whose lock stays inside it) or its lock cannot be read."""
    if not python.paths:
        return None
    try:
        return lock_requirements(lock=Path(python.paths[0]) / LOCK_FILE)
    except OSError:
        return None


def environment_prepare(*, packages: Sequence[str], root: Path, log_path: Path) -> TaskPython:
    """The interpreter a trial of this environment runs: the node's own when it pins nothing,
    else its venv, built now unless an earlier build left it complete."""
    pinned = environment_packages_validate(packages=list(packages))
    if not pinned:
        return TaskPython()
    key = environment_key(packages=pinned, base=node_runtime_identity())
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{key}.lock"):
        if not environment_built(key=key, root=root):
            _build(venv=root.resolve() / key, packages=pinned, log_path=log_path)
    return environment_python(key=key, root=root)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # flock belongs to the open file, so it also keeps apart the threads of one worker.
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(*, venv: Path, packages: list[str], log_path: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log_path.open("w", encoding="utf-8") as log:
            log.write(f"Building {venv.name} on {node_runtime_identity()}: {' '.join(packages)}\n")
            log.flush()
            _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log=log,
                 log_path=log_path)
            _node_site_append(venv=venv)
            pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                   "install", "--only-binary=:all:", "--no-input", "--disable-pip-version-check",
                   "--progress-bar", "off"]
            # Resolved first, then installed by hash, every package of the closure (what the
            # node's runtime does not already provide): the wheels installed are the ones
            # resolved, and the lock beside the venv says which.
            closure_install(pip=pip, packages=packages, lock=venv / LOCK_FILE,
                            run=lambda argv: _run(argv, log=log, log_path=log_path))
            log.write("Environment ready.\n")
        (venv / READY_MARKER).touch()
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise


def _node_site_append(*, venv: Path) -> None:
    """`site.addsitedir` rather than a bare path: the node's own .pth files apply too."""
    node_sites = [path for path in dict.fromkeys(site.getsitepackages()) if Path(path).is_dir()]
    lines = [f"import site; site.addsitedir({path!r})\n" for path in node_sites]
    (_venv_site(venv=venv) / NODE_SITE_PTH).write_text("".join(lines), encoding="utf-8")


def _venv_site(*, venv: Path) -> Path:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return venv / "lib" / version / "site-packages"


def _run(argv: list[str], *, log: IO[str], log_path: Path) -> None:
    # The worker's PYTHONPATH and friends would leak the platform's own modules into pip.
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, check=False,
                                timeout=BUILD_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as error:
        log.write(f"Gave up after {BUILD_TIMEOUT_SECONDS:.0f} s.\n")
        log.flush()
        raise _failed(log_path=log_path) from error
    except OSError as error:
        log.write(f"Could not run {argv[0]}: {error}\n")
        log.flush()
        raise _failed(log_path=log_path) from error
    if result.returncode != 0:
        log.write(f"Exited with {result.returncode}.\n")
        log.flush()
        raise _failed(log_path=log_path)


def _failed(*, log_path: Path) -> EnvironmentBuildFailed:
    tail = log_tail(path=log_path, max_bytes=LOG_TAIL_BYTES)
    return EnvironmentBuildFailed(f"The environment could not be built:\n{tail}", log_tail=tail)


def log_tail(*, path: Path, max_bytes: int) -> str:
    """The end of a build log, at most `max_bytes`, from a line start."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - max_bytes, 0))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    if size > max_bytes and "\n" in text:
        text = text.split("\n", 1)[1]
    return text.strip()
