"""Environments under docker/podman: the environment's image, plus what the trial harness needs
and the environment's pinned packages, built once per node as a derived image.

    key = image_key(settings=..., base="tensorflow/tensorflow:2.21.0", packages=[...])
    python = image_derive(settings=..., base=..., packages=[...], key=key, log_path=...)
    python.image   # localhost/tfplatform-env:<key>

The harness (`training/` and `confinement/`, baked into the image at /opt/tfplatform, so nothing
of the node's files is mounted but the trial's data) needs tf-keras matching the image's TensorFlow,
landlockpy to confine itself, and scikit-learn for the built-in datasets; the build adds
whichever of them the image lacks (a stock `tensorflow/tensorflow` image has none). Like
the venvs of the sandbox, packages come as wheels only (`--only-binary=:all:`): the build runs
pip and no package's own code; and as there, the closure is resolved first and installed by hash
(pip_lock.py, run in the build by the image's own Python), its lock kept in the image at
/opt/tfplatform-env/requirements.lock. pip reaches the index with the node's own CA bundle and index
URL, copied into the build. The key hashes the base image's id, what the harness needs,
`training/`, `confinement/` and the packages, so a re-pulled base, a new pin or a platform
upgrade builds again, and equal environments share one image.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import ssl
import tarfile
from collections.abc import Sequence
from pathlib import Path

from training.errors import EnvironmentBuildFailed
from training.isolation.containers import ContainerSettings
from training.isolation.runtime import TaskPython, client_dir
from training.isolation.venvs import KEY_CHARS, environment_packages_validate

DERIVED_REPOSITORY = "localhost/tfplatform-env"
LABEL_ENVIRONMENT = "tfplatform.environment"
# module: requirement ({tf} becomes the image's TensorFlow major.minor).
HARNESS = {
    "tf_keras": "tf-keras=={tf}.*",
    "landlockpy": "landlockpy==0.2.0",
    "sklearn": "scikit-learn==1.9.1",
}
BUILD_DIR = "/tmp/tfplatform-build"  # noqa: S108 - inside the build container only
# training/ and confinement/ are baked in here, on the image's PYTHONPATH
HARNESS_DIR = "/opt/tfplatform"
LOG_TAIL_CHARS = 2000
LOCK_DIR = "/opt/tfplatform-env"  # the installed closure's lock stays in the image, for an audit
# Runs in the base image, beside pip_lock.py and errors.py (training/ as a namespace package):
# decides what it lacks, then resolves that and the pinned packages and installs them by hash.
INSTALL_SCRIPT = """
import importlib.metadata, importlib.util, json, os, subprocess, sys
from pathlib import Path
from training.isolation.pip_lock import closure_install
packages, harness, lock_dir = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
options = sys.argv[4:]
has_tf = importlib.util.find_spec("tensorflow") is not None
tf = ".".join(importlib.metadata.version("tensorflow").split(".")[:2]) if has_tf else ""
# Without TensorFlow the image cannot train; only what confines a task is added then.
missing = [requirement.format(tf=tf) for module, requirement in harness.items()
           if importlib.util.find_spec(module) is None and (has_tf or module == "landlockpy")]
wanted = missing + packages
print("installing:", " ".join(wanted) or "nothing", flush=True)
lock = Path(lock_dir) / "requirements.lock"
lock.parent.mkdir(parents=True, exist_ok=True)
lock.write_text("")
if wanted:
    env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--only-binary=:all:",
           *options]

    def run(argv):
        print("$", " ".join(argv), flush=True)
        subprocess.run(argv, check=True, env=env)

    closure_install(pip=pip, packages=wanted, lock=lock, run=run)
"""


def _base_image_id(*, settings: ContainerSettings, base: str) -> str:
    client = settings.client()
    with contextlib.suppress(Exception):  # not on this node yet: a real node pulls it
        return str(client.images.get(base).id)
    try:
        return str(client.images.pull(base).id)
    except Exception as error:
        raise EnvironmentBuildFailed(
            f"image {base!r} is not on node {settings.node} and could not be pulled",
            log_tail=str(error)[-LOG_TAIL_CHARS:],
        ) from error


def image_key(*, settings: ContainerSettings, base: str, packages: Sequence[str]) -> str:
    pinned = environment_packages_validate(packages=list(packages))
    base_id = _base_image_id(settings=settings, base=base)
    text = "\n".join([base_id, json.dumps(HARNESS, sort_keys=True), _harness_digest(), "",
                      *pinned])
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_CHARS]


def image_python(*, key: str) -> TaskPython:
    tag = f"{DERIVED_REPOSITORY}:{key}"
    return TaskPython(key=f"image:{tag}", executable="python3", image=tag)


def image_built(*, settings: ContainerSettings, key: str) -> bool:
    with contextlib.suppress(Exception):
        settings.client().images.get(f"{DERIVED_REPOSITORY}:{key}")
        return True
    return False


def image_derive(*, settings: ContainerSettings, base: str, packages: Sequence[str], key: str,
                 log_path: Path) -> TaskPython:
    """The derived image of `key`, built now unless this node has it."""
    if image_built(settings=settings, key=key):
        return image_python(key=key)
    pinned = environment_packages_validate(packages=list(packages))
    options, files = _pip_node_options()
    # The harness goes in last: a platform upgrade then reuses the engine's cached pip layer.
    containerfile = (
        f"FROM {base}\nUSER 0\nCOPY build/ {BUILD_DIR}/\n"
        f"RUN python3 {BUILD_DIR}/install.py {shlex.quote(json.dumps(pinned))} "
        f"{shlex.quote(json.dumps(HARNESS))} {LOCK_DIR} "
        f"{' '.join(shlex.quote(o) for o in options)} "
        f"&& rm -rf {BUILD_DIR}\n"
        f"COPY harness/ {HARNESS_DIR}/\nENV PYTHONPATH={HARNESS_DIR}\n"
        f"LABEL {LABEL_ENVIRONMENT}={key}\n"
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in {"Containerfile": containerfile.encode(),
                           "build/install.py": INSTALL_SCRIPT.encode(), **_lock_files(), **files,
                           **_harness_files()}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    failure = ""
    with log_path.open("w", encoding="utf-8") as log:
        try:
            for chunk in settings.client().api.build(
                fileobj=context, custom_context=True, dockerfile="Containerfile",
                tag=f"{DERIVED_REPOSITORY}:{key}", decode=True, rm=True, network_mode="host",
            ):
                log.write(str(chunk.get("stream", "")))
                if "error" in chunk:
                    failure = str(chunk["error"])
                    log.write(failure + "\n")
        except Exception as error:
            failure = f"the engine refused the build: {error}"
            log.write(failure + "\n")
    if failure or not image_built(settings=settings, key=key):
        tail = log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        raise EnvironmentBuildFailed(f"building on {base!r} failed", log_tail=tail)
    return image_python(key=key)


def _harness_files() -> dict[str, bytes]:
    """`training/` as this node runs it: a trial in the image runs the same harness, and
    confines itself with the same `confinement/`. With them, the platform's REST client, which
    a workspace's `tfp` runs (its layout as on the node)."""
    package = Path(__file__).resolve().parents[1]
    client = client_dir()
    files = {f"harness/{folder.name}/{path.relative_to(folder)}": path.read_bytes()
             for folder in (package, package.parent / "confinement")
             for path in sorted(folder.rglob("*.py"))}
    files.update({f"harness/platform/tfplatform_cli/{path.relative_to(client)}": path.read_bytes()
                  for path in sorted(client.rglob("*.py"))})
    return files


def _lock_files() -> dict[str, bytes]:
    """What the build's install.py imports: the same resolution as an environment's venv."""
    package = Path(__file__).resolve().parents[1]
    return {f"build/training/{name}": (package / name).read_bytes()
            for name in ("isolation/pip_lock.py", "errors.py")}


def _harness_digest() -> str:
    digest = hashlib.sha256()
    for name, data in _harness_files().items():
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()


def _pip_node_options() -> tuple[list[str], dict[str, bytes]]:
    """The node's index and CA bundle, so the build reaches the index the node reaches."""
    options: list[str] = []
    files: dict[str, bytes] = {}
    if index := os.environ.get("PIP_INDEX_URL"):
        options += ["--index-url", index]
    cafile = (os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
              or ssl.get_default_verify_paths().cafile)
    if cafile and os.path.isfile(cafile):
        files["build/ca.pem"] = Path(cafile).read_bytes()
        options += ["--cert", f"{BUILD_DIR}/ca.pem"]
    return options, files
