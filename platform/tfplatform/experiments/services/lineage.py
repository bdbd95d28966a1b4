"""A trial's lineage, recorded by the node that starts it (its chief's), once its environment
is built: the environment's revision and the packages it installed, the model module's sha256,
the dataset version and the fingerprint of its files as found, the seed and the nodes.

Hashing reads the module and an uploaded or shared dataset file (200 MiB at most) once per
trial start, on the node; a registered dataset is fingerprinted from its files' metadata
(datasets/fingerprints.py).
"""

import hashlib
from pathlib import Path

from django.conf import settings

from tfplatform.cluster.models import Node
from tfplatform.datasets.fingerprints import dataset_fingerprint_now
from tfplatform.datasets.models import Dataset
from tfplatform.datasets.selectors import dataset_for_name
from tfplatform.experiments.models import Experiment, Trial, TrialLineage
from tfplatform.experiments.revisions import environment_content_hash
from tfplatform.experiments.validation import UPLOADED_DATASET
from training import catalog
from training.isolation.runtime import TaskPython
from training.isolation.venvs import environment_resolved


def trial_lineage_record(*, trial: Trial, python: TaskPython, node: Node | None) -> TrialLineage:
    """Recorded again, whole, if the trial's start is (a redelivered message)."""
    experiment = trial.experiment
    version = _dataset_version(experiment=experiment)
    resolved = environment_resolved(python=python)
    fields = {
        **_environment_fields(experiment=experiment),
        "build_key": python.key[:200],
        "module": experiment.model,
        "module_sha256": experiment_module_sha256(experiment=experiment),
        "dataset": experiment.dataset,
        "dataset_version": version.version if version is not None else None,
        "dataset_fingerprint": experiment_dataset_fingerprint(experiment=experiment,
                                                              version=version),
        "seed": _seed(experiment=experiment),
        "nodes": _nodes(trial=trial, node=node),
    }
    if resolved is not None:
        fields |= {"packages": resolved, "packages_resolved": True}
    lineage, _ = TrialLineage.objects.update_or_create(trial=trial, defaults=fields)
    return lineage


def _environment_fields(*, experiment: Experiment) -> dict[str, object]:
    """The pinned revision's contents; an experiment that pinned none (a workspace's session,
    one submitted before revisions) builds what its environment holds now."""
    environment, revision = experiment.environment, experiment.environment_revision
    if environment is None:
        return {"packages": [], "packages_resolved": False}
    if revision is not None:
        image, tensorflow, packages = (revision.image, revision.tensorflow_version,
                                       list(revision.packages))
        content_hash = revision.content_hash
    else:
        image, tensorflow = environment.image, environment.tensorflow_version
        packages = sorted(environment.extra_packages)
        content_hash = environment_content_hash(image=image, tensorflow_version=tensorflow,
                                                packages=packages)
    return {
        "environment_name": environment.name,
        "environment_revision": revision.number if revision is not None else None,
        "environment_hash": content_hash, "image": image, "tensorflow_requested": tensorflow,
        "packages": packages, "packages_resolved": False,
    }


def experiment_module_sha256(*, experiment: Experiment) -> str:
    """Of the model module its trials load now: its upload's stored copy, the shared folder's
    file, or a built-in model's source; empty when there is none to read."""
    if experiment.model_file:
        return _file_sha256(Path(experiment.model_file.path))
    if experiment.model.startswith("/"):
        return _file_sha256(Path(experiment.model))
    return _file_sha256(catalog.builtin_module_path(model=experiment.model))


def _dataset_version(*, experiment: Experiment) -> Dataset | None:
    if experiment.dataset_version_number is not None:
        return experiment.dataset_version  # None once the version is deleted for good
    if experiment.dataset_file or experiment.dataset in catalog.BUILTIN_DATASETS \
            or experiment.dataset in ("", UPLOADED_DATASET) or experiment.dataset.startswith("/"):
        return None
    return dataset_for_name(user=experiment.owner, name=experiment.dataset)


def experiment_dataset_fingerprint(*, experiment: Experiment, version: Dataset | None) -> str:
    """Of the dataset its trials read now: a registered `version`'s files, or the sha256 of an
    upload's stored copy or a shared file; empty for a built-in dataset."""
    if version is not None:
        return dataset_fingerprint_now(dataset=version)
    if experiment.dataset_file:
        return _file_sha256(Path(experiment.dataset_file.path))
    if experiment.dataset.startswith("/"):
        return _file_sha256(Path(experiment.dataset))
    return ""  # a built-in dataset: the platform's release says which


def _file_sha256(path: Path | None) -> str:
    """Empty when there is none to read: the trial then fails on it with its own reason."""
    if path is None:
        return ""
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return ""


def _seed(*, experiment: Experiment) -> int | None:
    seed = experiment.hyperparameters.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _nodes(*, trial: Trial, node: Node | None) -> list[str]:
    held = sorted(set(trial.allocations.values_list("node__hostname", flat=True)))
    if held:
        return held
    return [node.hostname if node is not None else settings.PLATFORM.node_name]
