"""Publishing: a trained experiment deployed, a SavedModel uploaded or registered."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Max

from serving import graph_check, layout
from serving.archive import ArchiveError, extract_saved_model_zip
from serving.environment import model_process_env
from serving.tflite_convert import TFLITE_FILE
from tfplatform.accounts.models import User
from tfplatform.accounts.storage import storage_quota_check
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import audit_record
from tfplatform.core.errors import (
    Conflict,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    PayloadTooLarge,
)
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir
from tfplatform.modelregistry.dispatch import version_load_on_commit
from tfplatform.modelregistry.models import (
    ModelVersion,
    RegisteredModel,
)
from tfplatform.modelregistry.services.sync import model_base_path
from training.errors import no_space

MAX_UPLOAD_BYTES = 500 * 1024 * 1024


# A publish copies for seconds to minutes; what is older than this and unnamed is a leftover.
LEFTOVER_GRACE_SECONDS = 600.0


def _model_for_writer(*, user: User, name: str) -> RegisteredModel:
    """Get or create a registered model that `user` may add versions to."""
    model, created = RegisteredModel.objects.get_or_create(
        name=name, defaults={"owner": user, "team_id": user.team_id}
    )
    if not created and not model_can_change(user=user, model=model):
        raise Conflict(f"The model name '{name}' is taken; choose another.")
    return model


def model_can_change(*, user: User, model: RegisteredModel) -> bool:
    if user.is_staff or model.owner_id == user.pk:
        return True
    return model.team_id is not None and model.team_id == user.team_id


def model_name_check(*, name: str) -> None:
    try:
        layout.model_path(model_base=model_base_path(), model_name=name)
    except ValueError as error:
        raise InvalidInput(
            "model_name must be letters, digits, '.', '_' or '-', starting with a letter or digit.",
            field="model_name",
        ) from error
    if layout.model_name_reserved(name):
        raise InvalidInput(f"The model name '{name}' is a file of the model server's; choose "
                           "another.", field="model_name")


GRAPH_CHECK_SECONDS = 300


TFLITE_CONVERT_SECONDS = 600


def saved_model_verify(path: Path) -> dict[str, Any]:
    """Refuses a SavedModel whose graphs use an op that inference graphs do not (files, Python,
    datasets), hide a graph or misuse the saver (serving/graph_check.py), or that the model
    server's TF Serving release lacks (TF_SERVING_VERSION), read in a process of
    its own: it is hostile input, and reading it takes TensorFlow's protos, which the web
    process does not load. Returns its serving signatures."""
    allowed = ",".join(settings.PLATFORM.model_allowed_ops)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "serving.graph_check", str(path), f"--allow={allowed}",
             f"--serving-version={settings.PLATFORM.tf_serving_version}"],
            cwd=settings.ROOT_DIR, capture_output=True, text=True, timeout=GRAPH_CHECK_SECONDS,
            env=model_process_env(extra={"TF_CPP_MIN_LOG_LEVEL": "3"}),
        )
    except subprocess.TimeoutExpired as error:
        raise InvalidInput("The SavedModel could not be checked in time.") from error
    try:
        report = json.loads(done.stdout or "{}")
    except ValueError:
        report = {}
    if done.returncode == 0:
        signatures = report.get("signatures") if isinstance(report, dict) else None
        return signatures if isinstance(signatures, dict) else {}
    if done.returncode == graph_check.EXIT_FINDINGS and report.get("findings"):
        ops = sorted({str(finding["op"]) for finding in report["findings"]})
        raise InvalidInput(
            f"The SavedModel uses {', '.join(ops)}, which {'is' if len(ops) == 1 else 'are'} "
            "not allowed in a served model: only the operations of inference graphs are "
            "(math, neural-network, array, control-flow and variable operations, and the "
            "restore of the model's own variables/). An operator can allow specific ones with "
            "PLATFORM_MODEL_ALLOWED_OPS."
        )
    if done.returncode == graph_check.EXIT_UNSERVABLE and report.get("unserved"):
        ops = [str(op) for op in report["unserved"]]
        version = settings.PLATFORM.tf_serving_version
        raise InvalidInput(
            f"The SavedModel uses {', '.join(ops)}, which TensorFlow Serving {version} (the model "
            f"server's release) does not have, so it would not load: export it with TensorFlow "
            f"{version}, or serve it with a newer TF Serving (TF_SERVING_VERSION)."
        )
    raise InvalidInput(f"The SavedModel cannot be read: {report.get('error', 'unknown error')}.")


def saved_model_tflite_add(path: Path) -> None:
    """Converts the SavedModel at `path` to TF Lite and writes model.tflite beside it. The
    converter loads the (hostile) SavedModel, so it runs in a process of its own that confines
    itself (serving/tflite_convert.py) and writes only a scratch directory: never the checked
    SavedModel files, which are copied from nowhere else."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / TFLITE_FILE
        try:
            done = subprocess.run(
                [sys.executable, "-m", "serving.tflite_convert", str(path), str(output)],
                cwd=settings.ROOT_DIR, capture_output=True, text=True,
                timeout=TFLITE_CONVERT_SECONDS,
                env=model_process_env(extra={"TF_CPP_MIN_LOG_LEVEL": "3"}),
            )
        except subprocess.TimeoutExpired as error:
            raise InvalidInput("The SavedModel could not be converted to TF Lite in time.",
                               field="tflite") from error
        if done.returncode != 0 or not output.is_file():
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            reason = lines[-1][:500] if lines else f"exit {done.returncode}"
            raise InvalidInput(f"The SavedModel cannot be converted to TF Lite: {reason}",
                               field="tflite")
        shutil.copyfile(output, path / TFLITE_FILE)


def _version_verify(path: Path, *, tflite: bool) -> dict[str, Any]:
    if (path / TFLITE_FILE).exists():
        # Only the platform's own converter writes one: a .tflite file is a program the graph
        # check cannot read, and the server would run it instead of the checked SavedModel.
        raise InvalidInput(f"A SavedModel to publish must not contain {TFLITE_FILE}; ask for "
                           "a TF Lite version (tflite) and the platform converts it.")
    signatures = saved_model_verify(path)
    if tflite:
        saved_model_tflite_add(path)
    return signatures


def _version_publish(
    *,
    user: User,
    name: str,
    source: Path,
    experiment: Experiment | None,
    untrusted: bool = False,
    tflite: bool = False,
    audit_source: str = "",
) -> ModelVersion:
    """`audit_source`: where a staff member's registration came from; a version they add to
    another owner's model is then an audit row."""
    model_name_check(name=name)
    with transaction.atomic():
        model = _model_for_writer(user=user, name=name)
    storage_quota_check(user=user, adding=layout.tree_bytes(root=source))
    signatures: dict[str, Any] = {}
    try:
        published = layout.publish_version(
            source=source, model_base=model_base_path(), model_name=name, untrusted=untrusted,
            verify=lambda path: signatures.update(_version_verify(path, tflite=tflite)),
            # An undeployed version's files are gone but its row stays: never its number again.
            after=model.versions.aggregate(n=Max("version"))["n"] or 0,
        )
    except ValueError as error:
        raise InvalidInput(str(error)) from error
    except OSError as error:
        if no_space(error):  # the staging copy is gone: the server never saw a number for it
            raise InsufficientStorage(
                "The model store is out of disk space; the version was not published. Try again "
                "once an operator has freed space."
            ) from error
        raise
    with transaction.atomic():
        version = ModelVersion.objects.create(
            model=model,
            version=published.version,
            source_experiment=experiment,
            path=str(published.path),
            state=ModelVersion.State.LOADING,
            size_bytes=layout.tree_bytes(root=published.path),
            signatures=signatures,
            tflite=tflite,
        )
        if audit_source and model.owner_id != user.pk:
            audit_record(actor=user, action=AuditAction.MODEL_REGISTER, target=model,
                         before=None, after={"version": version.version, "path": audit_source,
                                             "owner": str(model.owner)})
        # Loading can take minutes (two of the server's waits): the model loader does it, and
        # the version says LOADING until then; no web worker is held.
        version_load_on_commit(version_id=version.pk)
    return version


def model_files_leftovers_remove(*, older_than: float = LEFTOVER_GRACE_SECONDS) -> list[Path]:
    """What a web process killed mid-publish (deploy, upload, import) left on disk: its staging
    copy, or a version directory whose row it never wrote. The model server never loads them
    (its config names versions), but they take space and a version number; a retry after the
    sweep gets the number back."""
    base = model_base_path()
    known = {Path(os.path.normpath(path))
             for path in ModelVersion.objects.exclude(path="").values_list("path", flat=True)}
    leftovers = layout.leftovers_find(model_base=base, known=known, older_than=older_than)
    for path in leftovers:
        layout.version_remove(model_base=base, path=path)
    return leftovers


def experiment_export_dir(*, experiment: Experiment) -> Path:
    """Where the platform told the experiment's trials to export: its own work dir, nowhere else.

    Never `results["export_path"]`: that comes from an event the trial wrote, i.e. from user
    code, which could name another experiment's export or any directory the server can read.
    """
    return experiment_work_dir(experiment_id=experiment.pk) / "export"


def experiment_deploy(
    *, user: User, experiment: Experiment, model_name: str, tflite: bool = False
) -> ModelVersion:
    """`tflite`: also convert it to TF Lite (model.tflite beside the SavedModel), which the
    embedded model server then serves for this version."""
    if experiment.state != Experiment.State.COMPLETED:
        raise Conflict("Only a completed experiment with an exported model can be deployed.")
    export = experiment_export_dir(experiment=experiment)
    if not export.is_symlink() and not export.exists():
        raise Conflict("The experiment has no exported model on disk.")
    model_name_check(name=model_name)
    # The trial wrote this tree: a link in it (to another experiment, to /etc) or a fifo,
    # socket or device is refused before anything is created, and the copy follows nothing.
    try:
        layout.plain_tree_check(root=export)
    except layout.UnsafeSource as error:
        raise Conflict(f"The experiment's exported model cannot be deployed: {error}.") from error
    return _version_publish(
        user=user, name=model_name, source=export, experiment=experiment, untrusted=True,
        tflite=tflite,
    )


def model_register_upload(
    *, user: User, model_name: str, upload: UploadedFile, tflite: bool = False
) -> ModelVersion:
    """Bring your own model: a zipped SavedModel, checked before anything is extracted."""
    if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
        raise PayloadTooLarge(f"The archive is larger than {MAX_UPLOAD_BYTES // 2**20} MiB.")
    model_name_check(name=model_name)
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "upload.zip"
        with archive.open("wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        try:
            root = extract_saved_model_zip(
                archive=archive, destination=Path(scratch) / "model", max_bytes=MAX_UPLOAD_BYTES
            )
        except ArchiveError as error:
            raise InvalidInput(str(error), field="file") from error
        return _version_publish(user=user, name=model_name, source=root, experiment=None,
                                tflite=tflite)


def model_register_path(
    *, user: User, model_name: str, path: str, tflite: bool = False
) -> ModelVersion:
    """Staff only. `user` is who acts: a version added to another owner's model is an audit
    row, naming the path it came from."""
    if not user.is_staff:
        raise Forbidden("Only staff may register a model from a path on the server.")
    source = model_import_source(path=path)
    # Copied as a trial's export is: a link or special file anywhere in it is refused.
    return _version_publish(user=user, name=model_name, source=source, experiment=None,
                            untrusted=True, tflite=tflite, audit_source=str(source))


def model_import_source(*, path: str) -> Path:
    """A SavedModel directory inside PLATFORM_MODEL_IMPORT_DIR, reached without a symlink below
    it: the server's other files (database, secret key, users' data) are never a source."""
    configured = Path(os.path.normpath(settings.PLATFORM.model_import_dir))
    if not os.path.isabs(path):
        raise InvalidInput("path must be an absolute path to a SavedModel directory.", field="path")
    normal = Path(os.path.normpath(path))
    root = next((r for r in (configured, configured.resolve())
                 if normal.is_relative_to(r) and normal != r), None)
    if root is None:
        raise InvalidInput(f"path must be a directory inside the import folder {configured}.",
                           field="path")
    current = root
    for part in normal.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise InvalidInput("path must not pass through a symbolic link.", field="path")
    if not normal.is_dir():
        raise InvalidInput("path must be an existing SavedModel directory.", field="path")
    return normal
