"""Business validation of experiment submissions, with field-level errors."""

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from tfplatform.accounts.models import User
from tfplatform.core.errors import InvalidInput
from tfplatform.datasets.models import Dataset
from tfplatform.datasets.selectors import (
    dataset_for_name,
    dataset_reference_split,
    dataset_version_readable,
)
from tfplatform.datasets.services import dataset_source_for_trials
from training import board_layout as board
from training import catalog, precision, scaling
from training import errors as training_errors
from training.shard_schema import ShardedSource
from training.spec import Resources, TrialSpec
from training.target import Target, target_make

UPLOADED_MODEL = "upload"
UPLOADED_DATASET = "upload"
MAX_UPLOAD_BYTES = 200 * 1024 * 1024


def hyperparameters_clean(*, model: str, hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters that will run: the model's defaults overlaid with the user's, every
    number within the catalog's bounds (training/catalog.py BOUNDS)."""
    try:
        cleaned = catalog.hyperparameters_resolve(model=model, values=hyperparameters)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="hyperparameters") from error
    return cleaned


def priority_check(*, user: Any, priority: int) -> None:
    """Above its team's band (or the default band without a team) only staff may go."""
    if user.is_staff:
        return
    team = user.team
    highest = team.max_priority if team is not None else settings.PLATFORM.user_max_priority
    if priority > highest:
        whose = f"team {team.name}" if team is not None else "users without a team"
        raise InvalidInput(
            f"priority {priority} is above {highest}, the highest {whose} may set; staff can "
            "raise it.", field="priority",
        )


def resources_check(*, workers: int, gpus_per_worker: int, parameter_servers: int) -> None:
    limits = settings.PLATFORM
    if not 1 <= workers <= limits.max_workers:
        raise InvalidInput(
            f"workers must be between 1 and {limits.max_workers}.", field="resources"
        )
    if not 0 <= gpus_per_worker <= limits.max_gpus_per_worker:
        raise InvalidInput(
            f"gpus_per_worker must be between 0 and {limits.max_gpus_per_worker}.",
            field="resources",
        )
    if not 0 <= parameter_servers <= limits.max_parameter_servers:
        raise InvalidInput(
            f"parameter_servers must be between 0 and {limits.max_parameter_servers}.",
            field="resources",
        )


def target_check(*, metric: str, mode: str, value: float | None) -> Target:
    """The target with its mode chosen when not given; a field error names what is wrong."""
    try:
        return target_make(metric=metric, mode=mode, value=value)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="target") from error


def elastic_batch_check(*, hyperparameters: dict[str, Any], replicas: int,
                        replicas_target: int) -> None:
    """The smallest size of an elastic request can keep the largest's global batch (with
    scale_batch_size off, the batch must split evenly over the largest size's replicas)."""
    try:
        scaling.batch_plan(
            batch_size=hyperparameters["batch_size"], replicas=replicas,
            learning_rate=hyperparameters["learning_rate"],
            scale=hyperparameters["scale_batch_size"],
            warmup_epochs=hyperparameters["warmup_epochs"], replicas_target=replicas_target)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="hyperparameters") from error


def precision_check(
    *, hyperparameters: dict[str, Any], workers: int, gpus_per_worker: int, parameter_servers: int
) -> None:
    """Mixed precision and XLA only where the resources asked for can use them."""
    try:
        precision.precision_check(
            policy=hyperparameters["mixed_precision"],
            jit_compile=hyperparameters["jit_compile"],
            resources=Resources(workers=workers, gpus_per_worker=gpus_per_worker,
                                parameter_servers=parameter_servers),
        )
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="hyperparameters") from error


def board_check(*, hyperparameters: dict[str, Any], parameter_servers: int) -> None:
    """A profiler trace only where step-level callbacks may run (not beside parameter servers)."""
    try:
        board.board_check(profile_steps=hyperparameters["profile_steps"],
                          resources=Resources(parameter_servers=parameter_servers))
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="hyperparameters") from error


def model_check(*, model: str, upload: UploadedFile | None) -> None:
    known = (*catalog.ZOO_MODELS, *catalog.DIAGNOSTIC_JOBS)
    if model == UPLOADED_MODEL:
        if upload is None:
            raise InvalidInput("model 'upload' needs a model_file.", field="model_file")
        _size_check(upload=upload, field="model_file")
        with _as_file(upload=upload, suffix=".py") as path:
            try:
                catalog.user_module_validate(path=str(path))
            except training_errors.InvalidInput as error:
                raise InvalidInput(str(error), field="model_file") from error
        return
    if upload is not None:
        raise InvalidInput("Set model to 'upload' when sending a model_file.", field="model")
    if model.startswith("/"):
        path = shared_path_check(value=model, field="model", suffixes=(".py",))
        try:
            catalog.user_module_validate(path=str(path))
        except training_errors.InvalidInput as error:
            raise InvalidInput(str(error), field="model") from error
        return
    if model not in known:
        raise InvalidInput(
            f"Unknown model '{model}'. Choose one of: {', '.join(known)}, 'upload', "
            "or the path of a module in the shared folder.",
            field="model",
        )


def dataset_check(
    *, dataset: str, upload: UploadedFile | None, hyperparameters: dict[str, Any],
    owner: User | None = None, parameter_servers: int = 0, pinned: Dataset | None = None,
) -> Dataset | None:
    """A built-in name, an upload, a file in the shared folder, or (with `owner`) a registered
    dataset the owner can see, `name` (its newest version) or `name@version`, or the version
    `pinned` (a reproduction's): that version, its folders checked again, is returned."""
    if dataset == UPLOADED_DATASET:
        if upload is None:
            raise InvalidInput("dataset 'upload' needs a dataset_file.", field="dataset_file")
        _size_check(upload=upload, field="dataset_file")
        name = (upload.name or "").lower()
        if not name.endswith((".npz", ".csv")):
            raise InvalidInput("dataset_file must be a .npz or .csv file.", field="dataset_file")
        with _as_file(upload=upload, suffix=Path(name).suffix) as path:
            _dataset_file_check(path=path, hyperparameters=hyperparameters, field="dataset_file")
        return None
    if upload is not None:
        raise InvalidInput("Set dataset to 'upload' when sending a dataset_file.", field="dataset")
    if dataset.startswith("/"):
        path = shared_path_check(value=dataset, field="dataset", suffixes=(".npz", ".csv"))
        _dataset_file_check(path=path, hyperparameters=hyperparameters, field="dataset")
        return None
    if dataset in catalog.BUILTIN_DATASETS:
        return None
    version = _registered_version(owner=owner, reference=dataset, pinned=pinned)
    if version is None:
        raise InvalidInput(
            f"Unknown dataset '{dataset}'. Choose one of: "
            f"{', '.join(catalog.BUILTIN_DATASETS)}, 'upload', or a registered dataset "
            "(GET /api/v1/datasets/).",
            field="dataset",
        )
    source = dataset_source_for_trials(dataset=version)
    if source.format == "parquet" and parameter_servers:
        # pyarrow reads it inside the pipeline's own Python process; parameter-server training
        # ships the pipeline's graph to workers, where that Python is not.
        raise InvalidInput(
            f"Dataset '{dataset}' is Parquet, which parameter-server training cannot read: "
            "train it without parameter servers, or register a TFRecord or CSV copy (Spark "
            "writes those too).",
            field="dataset",
        )
    return version


def dataset_reference_pin(*, owner: User, reference: str) -> str:
    """A registered dataset's `name` as `name@<its newest version>`, for what submits its
    experiments later (a search's trials): they all read the version newest when it was asked
    for. Anything else (a version already named, a built-in, an upload, a path) as it is."""
    if reference in catalog.BUILTIN_DATASETS or reference == UPLOADED_DATASET \
            or reference.startswith("/"):
        return reference
    name, version = dataset_reference_split(reference=reference)
    found = dataset_for_name(user=owner, name=name) if version is None else None
    return f"{name}@{found.version}" if found is not None else reference


def _registered_version(*, owner: User | None, reference: str,
                        pinned: Dataset | None) -> Dataset | None:
    if owner is None:
        return None
    if pinned is None:
        name, number = dataset_reference_split(reference=reference)
        return dataset_for_name(user=owner, name=name, version=number)
    readable = dataset_version_readable(user=owner, dataset_id=pinned.pk)
    if readable is None:
        raise InvalidInput(f"Dataset '{pinned.name}' version {pinned.version} is deleted, or "
                           "not yours to read.", field="dataset")
    return readable


def registered_source(*, owner: User, name: str) -> ShardedSource | None:
    """The newest version of the registered dataset `name` as its trials will read it (an
    experiment submitted before versions pinned none); None when it names none the owner can
    see (deleted since, or never registered)."""
    if name in catalog.BUILTIN_DATASETS or name == UPLOADED_DATASET or name.startswith("/"):
        return None
    dataset = dataset_for_name(user=owner, name=name)
    return dataset_source_for_trials(dataset=dataset) if dataset is not None else None


def _size_check(*, upload: UploadedFile, field: str) -> None:
    if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
        raise InvalidInput(
            f"{field} is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB.", field=field
        )


@contextmanager
def _as_file(*, upload: UploadedFile, suffix: str) -> Iterator[Path]:
    """The upload as a file on disk, for checks that read paths; the upload is rewound after."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"upload{suffix}"
        with path.open("wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        upload.seek(0)
        yield path


def _dataset_file_check(*, path: Path, hyperparameters: dict[str, Any], field: str) -> None:
    if path.suffix == ".csv" and not hyperparameters.get("label_column"):
        raise InvalidInput(
            "A CSV dataset needs hyperparameters.label_column naming the label column.",
            field="hyperparameters",
        )
    spec = TrialSpec(
        trial_id="upload-check",
        model="upload",
        dataset=str(path),
        work_dir=str(path.parent),
        label_column=str(hyperparameters.get("label_column", "")),
        hyperparameters=hyperparameters,
    )
    try:
        catalog.dataset_validate(spec=spec)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field=field) from error


def shared_path_check(*, value: str, field: str, suffixes: tuple[str, ...]) -> Path:
    """A module or dataset referenced by path must live in the shared folder staff manage."""
    shared = Path(settings.PLATFORM.shared_dir).resolve()
    path = Path(value).resolve()  # resolves '..' and links before the containment check
    if not path.is_relative_to(shared) or not path.is_file():
        raise InvalidInput(f"{value} is not a file in the shared folder {shared}.", field=field)
    if path.suffix not in suffixes:
        raise InvalidInput(f"{value} must end in {' or '.join(suffixes)}.", field=field)
    return path
