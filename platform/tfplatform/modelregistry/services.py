"""Writes of the model registry: deploy, labels, canary share, undeploy, bring your own model.

Deploy and upload publish a checked copy and answer at once with a LOADING version; the model
loader (`manage.py model_loader`, a Celery worker on the `models` queue) loads it.

Every change ends in `model_server_sync`, which sends the model server the complete list of
models, versions and labels (TF Serving's HandleReloadConfigRequest replaces the whole list, so
deploying one model never unloads another) and writes the same list to the config file.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from serving import graph_check, layout
from serving.archive import ArchiveError, extract_saved_model_zip
from serving.client import ModelEntry, ModelServerError
from serving.environment import model_process_env
from serving.tflite_convert import TFLITE_FILE
from tfplatform.accounts.models import User
from tfplatform.accounts.storage import storage_quota_check
from tfplatform.core.errors import (
    Conflict,
    Forbidden,
    InsufficientStorage,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir
from tfplatform.modelregistry.dispatch import version_load_on_commit
from tfplatform.modelregistry.health import scrape_parse
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
    ServingSample,
)
from tfplatform.modelregistry.selectors import model_route_cache_clear
from tfplatform.modelregistry.server import (
    LOAD_TIMEOUT_SECONDS,
    model_config_write,
    model_server_client,
)
from training.errors import no_space

EMPTY_MODEL_CONFIG = "model_config_list {\n}\n"
SERVED_STATES = (ModelVersion.State.LOADING, ModelVersion.State.AVAILABLE)
LABELS = tuple(ModelLabel.Name.values)
MAX_UPLOAD_BYTES = 500 * 1024 * 1024
# A publish copies for seconds to minutes; what is older than this and unnamed is a leftover.
LEFTOVER_GRACE_SECONDS = 600.0


def model_base_path() -> Path:
    return Path(settings.PLATFORM.model_base_path)


def model_config_path() -> Path:
    return model_base_path() / "models.config"


def model_config_ensure() -> Path:
    """The model server's config file must exist before it starts, even with no models yet."""
    path = model_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(EMPTY_MODEL_CONFIG)
    return path


def model_server_entries() -> list[ModelEntry]:
    entries = []
    for model in RegisteredModel.objects.prefetch_related("versions", "labels__version"):
        versions = tuple(
            sorted(v.version for v in model.versions.all() if v.state in SERVED_STATES)
        )
        if not versions:
            continue
        labels = {
            label.label: label.version.version
            for label in model.labels.all()
            if label.version.version in versions
        }
        entries.append(
            ModelEntry(
                name=model.name,
                base_path=str(
                    layout.model_path(model_base=model_base_path(), model_name=model.name)
                ),
                versions=versions,
                labels=labels,
            )
        )
    return entries


def model_server_sync() -> None:
    """After every change of versions or labels: the server and this process's routes follow."""
    model_route_cache_clear()
    entries = model_server_entries()
    model_config_write(entries=entries, path=model_config_ensure())
    try:
        model_server_client().reload_config(models=entries, timeout=LOAD_TIMEOUT_SECONDS)
    except (ModelServerError, TimeoutError) as error:
        raise Unavailable(f"The model server did not accept the new model list: {error}") from error


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
    datasets), hide a graph or misuse the saver (serving/graph_check.py), read in a process of
    its own: it is hostile input, and reading it takes TensorFlow's protos, which the web
    process does not load. Returns its serving signatures."""
    allowed = ",".join(settings.PLATFORM.model_allowed_ops)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "serving.graph_check", str(path), f"--allow={allowed}"],
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
) -> ModelVersion:
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
        # Loading can take minutes (two of the server's waits): the model loader does it, and
        # the version says LOADING until then; no web worker is held.
        version_load_on_commit(version_id=version.pk)
    return version


def model_version_load(*, version_id: int) -> ModelVersion | None:
    """The loader's work: the server gets the list with this version, which becomes AVAILABLE
    (and `stable` when its model has none) or FAILED with the server's reason. None when the
    version is no longer waiting (undeployed meanwhile, or loaded by an earlier delivery)."""
    version = ModelVersion.objects.select_related("model").filter(
        pk=version_id, state=ModelVersion.State.LOADING).first()
    if version is None:
        return None
    try:
        model_server_sync()
        model_server_client().wait_available(
            name=version.model.name, version=version.version, timeout=LOAD_TIMEOUT_SECONDS
        )
    except (ModelServerError, TimeoutError, Unavailable) as error:
        ModelVersion.objects.filter(pk=version.pk, state=ModelVersion.State.LOADING).update(
            state=ModelVersion.State.FAILED, error=str(error)[:2000]
        )
        model_server_sync_quietly()  # a failed version leaves the list
        version.refresh_from_db()
        return version
    # One transaction: no reader may see the first version available yet without `stable`.
    with transaction.atomic():
        ModelVersion.objects.filter(pk=version.pk, state=ModelVersion.State.LOADING).update(
            state=ModelVersion.State.AVAILABLE)
        version.refresh_from_db()
        labelled = False
        if version.state == ModelVersion.State.AVAILABLE:
            _, labelled = ModelLabel.objects.get_or_create(
                model=version.model, label=ModelLabel.Name.STABLE, defaults={"version": version})
    if model_versions_retire(model=version.model) or labelled:
        model_server_sync_quietly()
    return version


def model_versions_retire(*, model: RegisteredModel) -> list[int]:
    """Only the labelled and the newest PLATFORM_MODEL_VERSIONS_LOADED versions stay loaded:
    every loaded version holds the model server's memory. The others become UNLOADED (their
    files stay); returns their numbers."""
    keep = settings.PLATFORM.model_versions_loaded
    served = list(model.versions.filter(state__in=SERVED_STATES).order_by("-version")
                  .values_list("version", flat=True))
    labelled = set(model.labels.values_list("version__version", flat=True))
    retired = [v for v in served[keep:] if v not in labelled]
    model.versions.filter(version__in=retired).update(state=ModelVersion.State.UNLOADED)
    return retired


def model_versions_loading_resume(*, older_than: float = 0.0) -> list[int]:
    """Loads again what waits LOADING with no message on its way: the loader does this as it
    starts (a message lost with its process) and every few minutes for versions waiting longer
    than `older_than` seconds (the broker was away when the version was published). A version
    loaded meanwhile makes the copy of its message do nothing."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    waiting = list(ModelVersion.objects.filter(state=ModelVersion.State.LOADING,
                                               created_at__lte=cutoff)
                   .order_by("pk").values_list("pk", flat=True))
    for version_id in waiting:
        version_load_on_commit(version_id=version_id)
    return waiting


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


def model_server_sync_quietly() -> None:
    # The failure that brought us here is what the caller reports.
    with contextlib.suppress(Unavailable):
        model_server_sync()


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
    if not user.is_staff:
        raise Forbidden("Only staff may register a model from a path on the server.")
    source = model_import_source(path=path)
    # Copied as a trial's export is: a link or special file anywhere in it is refused.
    return _version_publish(user=user, name=model_name, source=source, experiment=None,
                            untrusted=True, tflite=tflite)


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


def model_label_set(*, model: RegisteredModel, label: str, version: ModelVersion) -> None:
    """Promote or roll back: point `label` at `version` (which must be loaded)."""
    if label not in LABELS:
        raise InvalidInput(f"label must be one of: {', '.join(LABELS)}.", field="label")
    if version.model_id != model.pk:
        raise NotFound("Model version not found.")
    if version.state != ModelVersion.State.AVAILABLE:
        raise Conflict(f"Version {version.version} is {version.state}, not available.")
    ModelLabel.objects.update_or_create(model=model, label=label, defaults={"version": version})
    model_server_sync()


def model_label_remove(*, model: RegisteredModel, label: str) -> None:
    if label == ModelLabel.Name.STABLE:
        raise Conflict("The stable label can be moved but not removed.")
    deleted, _ = ModelLabel.objects.filter(model=model, label=label).delete()
    if not deleted:
        raise NotFound(f"The model has no '{label}' label.")
    model_versions_retire(model=model)  # the version it held may be past the newest ones
    model_server_sync()


def model_settings_update(
    *, model: RegisteredModel, public: bool | None = None, canary_percent: int | None = None
) -> RegisteredModel:
    if canary_percent is not None:
        if not 0 <= canary_percent <= 100:
            raise InvalidInput("canary_percent must be between 0 and 100.", field="canary_percent")
        model.canary_percent = canary_percent
    if public is not None:
        model.public = public
    model.save(update_fields=["canary_percent", "public"])
    model_route_cache_clear()
    return model


def model_version_undeploy(*, version: ModelVersion) -> ModelVersion:
    """Stop serving one version and remove its files (a retired version's too)."""
    if (
        version.labels.filter(label=ModelLabel.Name.STABLE).exists()
        and version.model.versions.filter(state=ModelVersion.State.AVAILABLE)
        .exclude(pk=version.pk)
        .exists()
    ):
        raise Conflict("Move the stable label to another version before undeploying this one.")
    version.labels.all().delete()
    ModelVersion.objects.filter(pk=version.pk).update(state=ModelVersion.State.UNLOADED)
    model_server_sync()
    # Its files go too (they count against the owner's storage); the row stays as history.
    with contextlib.suppress(ValueError):
        layout.version_remove(model_base=model_base_path(), path=Path(version.path))
    ModelVersion.objects.filter(pk=version.pk).update(size_bytes=0)
    version.refresh_from_db()
    return version


# Health shows the last hour; a day of samples lets a restart or a gap be seen around it.
SERVING_SAMPLES_KEEP = timedelta(days=1)


def serving_health_record() -> int:
    """Scrape the model server's Prometheus endpoint once: a ServingSample for each registered
    model it reports and for each of its versions it reports, and forget samples older than
    SERVING_SAMPLES_KEEP. Returns the samples stored; raises ModelServerError when the server
    does not answer."""
    path = settings.PLATFORM.tf_serving_metrics_path
    if not path:
        return 0
    counts = scrape_parse(model_server_client().metrics(path=path))
    now = timezone.now()
    registered = RegisteredModel.objects.in_bulk(
        {name for name, _ in counts}, field_name="name")
    samples = [
        ServingSample(
            model=registered[name], version=version, recorded_at=now,
            requests_ok=figures.ok, requests_failed=figures.failed,
            latency_buckets=dict(figures.buckets),
        )
        for (name, version), figures in counts.items()
        if name in registered
    ]
    ServingSample.objects.bulk_create(samples)
    ServingSample.objects.filter(recorded_at__lt=now - SERVING_SAMPLES_KEEP).delete()
    return len(samples)
