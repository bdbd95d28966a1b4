"""Reproducing a finished experiment: a new one with everything its trial ran with pinned.

Pinned: the model module's bytes (an upload's stored copy; a shared module or a built-in model
while its sha256 is still the one the trial recorded), the dataset version (while its files'
fingerprint is still the registered one) or the uploaded dataset's bytes, the hyperparameters
with their seed, and the environment revision: its packages are built even when the
environment has been edited since. What can no longer be pinned (a deleted dataset version,
changed files, a changed module, a run that recorded nothing) refuses the reproduction (409)
naming it, unless `allow_changes`: then it runs with what there is now and says what differs.
"""

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from tfplatform.accounts.models import User
from tfplatform.core.errors import Conflict
from tfplatform.datasets.fingerprints import dataset_fingerprint_now
from tfplatform.datasets.selectors import dataset_for_name, dataset_version_readable
from tfplatform.experiments.models import Experiment, TrialLineage
from tfplatform.experiments.selectors.lineage import experiment_lineage_record
from tfplatform.experiments.services.lineage import (
    experiment_dataset_fingerprint,
    experiment_module_sha256,
)
from tfplatform.experiments.services.submission import (
    experiment_create,
    experiment_finished_check,
    experiment_request_of,
)

NAME_MAX = 200


class NotReproducible(Conflict):
    code = "not_reproducible"
    default_message = "The experiment can no longer be reproduced as it ran."


@dataclass(frozen=True)
class Reproduction:
    experiment: Experiment
    # What the new experiment holds as the original had it, in words.
    pinned: list[str]
    # What differs from the original run (only with allow_changes: otherwise refused).
    changes: list[str]
    # What a reproduction never pins, or pins despite a change since (the environment).
    notes: list[str]


def experiment_reproduce(*, user: User, experiment: Experiment,
                         allow_changes: bool = False) -> Reproduction:
    """`experiment` is one `user` may see; the new one is `user`'s, like a restart's."""
    experiment_finished_check(experiment=experiment, action="reproduced")
    record = experiment_lineage_record(experiment=experiment)
    pins: dict[str, Any] = {}
    found = _Findings()
    if record is None:
        found.changes.append(
            f"no trial of #{experiment.pk} recorded what it ran with (it never started, or "
            "ran before lineage was recorded): nothing can be compared")
    _environment(experiment=experiment, pins=pins, found=found)
    _dataset(user=user, experiment=experiment, record=record, pins=pins, found=found)
    _module(experiment=experiment, record=record, found=found)
    seed = experiment.hyperparameters.get("seed")
    found.pinned.append(f"hyperparameters as the original's (seed {seed})")
    if record is not None:
        ran = record.trial.tensorflow_version or "a version its tasks did not report"
        found.notes.append(f"TensorFlow is the nodes' own: the original ran {ran} on "
                           f"{', '.join(record.nodes)}; the scheduler places this run anew")
    if found.changes and not allow_changes:
        raise NotReproducible(
            f"Experiment #{experiment.pk} can no longer be reproduced as it ran: "
            f"{'; '.join(found.changes)}. Reproduce it with allow_changes to run it with what "
            "there is now.")
    name = f"{experiment.name} (reproduces #{experiment.pk})"
    with ExitStack() as stack:
        request = experiment_request_of(
            experiment=experiment, stack=stack, action="reproduced", name=name[:NAME_MAX],
            reproduces=experiment, **pins)
        created = experiment_create(owner=user, request=request)
    return Reproduction(experiment=created, pinned=found.pinned, changes=found.changes,
                        notes=found.notes)


@dataclass
class _Findings:
    pinned: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _environment(*, experiment: Experiment, pins: dict[str, Any], found: _Findings) -> None:
    environment, revision = experiment.environment, experiment.environment_revision
    if environment is None:
        return
    if revision is None:
        found.changes.append(
            f"environment '{environment.name}': the revision the original ran on was not "
            "recorded; the environment as it is now would run")
        return
    pins["environment_revision"] = revision
    found.pinned.append(f"environment '{environment.name}' revision {revision.number} "
                        f"({revision.content_hash[:12]}, {len(revision.packages)} pinned "
                        "packages)")
    newest = environment.revisions.order_by("-number").first()
    if newest is not None and newest.content_hash != revision.content_hash:
        found.notes.append(f"environment '{environment.name}' changed since (now revision "
                           f"{newest.number}); this run builds revision {revision.number}'s "
                           "packages")


def _dataset(*, user: User, experiment: Experiment, record: TrialLineage | None,
             pins: dict[str, Any], found: _Findings) -> None:
    number = experiment.dataset_version_number
    if number is None:
        _dataset_file(experiment=experiment, record=record, found=found)
        return
    pinned = experiment.dataset_version
    readable = (dataset_version_readable(user=user, dataset_id=pinned.pk)
                if pinned is not None else None)
    if readable is None:
        newest = dataset_for_name(user=user, name=experiment.dataset)
        found.changes.append(
            f"dataset '{experiment.dataset}' version {number} is deleted"
            + (f"; its newest version, {newest.version}, would run" if newest else ""))
        if newest is not None:
            pins["dataset_pin"] = newest
        return
    pins["dataset_pin"] = readable
    now = dataset_fingerprint_now(dataset=readable)
    if readable.fingerprint and now != readable.fingerprint:
        found.changes.append(
            f"dataset '{readable.name}' version {number}: its files changed since it was "
            f"registered (fingerprint {readable.fingerprint[:12]} → {now[:12]})")
    else:
        found.pinned.append(f"dataset '{readable.name}' version {number} "
                            f"({readable.fingerprint[:12] or 'no fingerprint'})")


def _dataset_file(*, experiment: Experiment, record: TrialLineage | None,
                  found: _Findings) -> None:
    """An upload, a shared file, a built-in, or a registered dataset named before versions:
    only files have bytes to compare."""
    if not experiment.dataset_file and not experiment.dataset.startswith("/"):
        if record is not None and record.dataset_version is not None:
            found.changes.append(
                f"dataset '{experiment.dataset}': the original did not pin its version (it "
                f"read version {record.dataset_version}); the newest would run")
        return
    now = experiment_dataset_fingerprint(experiment=experiment, version=None)
    # An upload by the name its owner gave it (stored as "<experiment id>-<name>").
    what = (PurePath(experiment.dataset_file.name or "").name.removeprefix(f"{experiment.pk}-")
            if experiment.dataset_file else experiment.dataset)
    if record is not None and record.dataset_fingerprint and now != record.dataset_fingerprint:
        found.changes.append(
            f"dataset file {what}: its bytes changed since (sha256 "
            f"{record.dataset_fingerprint[:12]} → {now[:12] or 'unreadable'})")
    elif record is not None:
        found.pinned.append(f"dataset file {what} (sha256 {now[:12]})")


def _module(*, experiment: Experiment, record: TrialLineage | None, found: _Findings) -> None:
    if record is None:
        return
    now = experiment_module_sha256(experiment=experiment)
    if record.module_sha256 and now != record.module_sha256:
        found.changes.append(
            f"model module {experiment.model}: its source changed since (sha256 "
            f"{record.module_sha256[:12]} → {now[:12] or 'unreadable'})")
    else:
        found.pinned.append(f"model module {experiment.model} (sha256 {now[:12]})")
