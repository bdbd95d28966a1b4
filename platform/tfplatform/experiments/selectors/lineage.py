"""Reads of lineage: what an experiment pinned and what its latest recorded trial ran with,
as one chain (experiment → trial → dataset version → environment revision → module)."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AnonymousUser

from tfplatform.accounts.models import User
from tfplatform.datasets.selectors import dataset_list
from tfplatform.experiments.models import EnvironmentRevision, Experiment, TrialLineage
from tfplatform.experiments.selectors.experiments import experiment_list


@dataclass(frozen=True)
class DatasetLink:
    name: str
    version: int | None
    # Set when the reader may open the version: still registered and theirs to see.
    dataset_id: int | None
    # The version's own, from its registration; and of the files as the trial found them.
    fingerprint: str
    fingerprint_seen: str
    deleted: bool

    @property
    def changed(self) -> bool:
        """Its files were no longer those registered when the trial read them."""
        return bool(self.fingerprint and self.fingerprint_seen
                    and self.fingerprint != self.fingerprint_seen)


@dataclass(frozen=True)
class EnvironmentLink:
    name: str
    environment_id: int | None
    revision: int | None
    content_hash: str
    image: str
    tensorflow_version: str
    packages: list[str]
    packages_resolved: bool
    build_key: str
    # The environment's newest revision: another than `revision` once it was edited since.
    current_revision: int | None

    @property
    def changed_since(self) -> bool:
        return (self.revision is not None and self.current_revision is not None
                and self.current_revision != self.revision)


@dataclass(frozen=True)
class Lineage:
    experiment_id: int
    experiment_name: str
    owner: str
    reproduced_from_id: int | None
    # The latest trial that recorded what it ran with; None while none has.
    trial_id: int | None
    trial_attempt: int | None
    trial_state: str
    tensorflow_version: str
    dataset: DatasetLink
    environment: EnvironmentLink | None
    module: str
    module_sha256: str
    seed: int | None
    nodes: list[str]
    recorded_at: datetime | None


def experiment_lineage_record(*, experiment: Experiment) -> TrialLineage | None:
    """What its latest trial that got as far as starting ran with."""
    return (TrialLineage.objects.filter(trial__experiment=experiment).select_related("trial")
            .order_by("-trial__restart_count").first())


def experiment_lineage(*, user: User | AnonymousUser, experiment: Experiment) -> Lineage:
    """`experiment` is one the reader may see (experiment_get)."""
    record = experiment_lineage_record(experiment=experiment)
    trial = record.trial if record is not None else None
    seed = experiment.hyperparameters.get("seed")
    return Lineage(
        experiment_id=experiment.pk, experiment_name=experiment.name,
        owner=experiment.owner.username, reproduced_from_id=experiment.reproduced_from_id,
        trial_id=trial.pk if trial is not None else None,
        trial_attempt=trial.restart_count if trial is not None else None,
        trial_state=trial.state if trial is not None else "",
        tensorflow_version=trial.tensorflow_version if trial is not None else "",
        dataset=_dataset_link(user=user, experiment=experiment, record=record),
        environment=_environment_link(experiment=experiment, record=record),
        module=experiment.model,
        module_sha256=record.module_sha256 if record is not None else "",
        seed=record.seed if record is not None else seed if isinstance(seed, int) else None,
        nodes=list(record.nodes) if record is not None else [],
        recorded_at=record.recorded_at if record is not None else None,
    )


def experiment_lineage_visible(*, user: User | AnonymousUser,
                               experiment_id: int | None) -> Lineage | None:
    """The chain of an experiment the reader may see; None for anyone else's (a public
    model's version shows its lineage to its team only)."""
    if experiment_id is None:
        return None
    experiment = experiment_list(user=user).filter(pk=experiment_id).first()
    return experiment_lineage(user=user, experiment=experiment) if experiment else None


def _dataset_link(*, user: User | AnonymousUser, experiment: Experiment,
                  record: TrialLineage | None) -> DatasetLink:
    pinned = experiment.dataset_version
    readable = pinned is not None and dataset_list(user=user).filter(pk=pinned.pk).exists()
    number = experiment.dataset_version_number
    if number is None and record is not None:
        number = record.dataset_version  # submitted before versions: the one it found
    return DatasetLink(
        name=experiment.dataset, version=number,
        dataset_id=pinned.pk if readable and pinned is not None else None,
        fingerprint=experiment.dataset_fingerprint,
        fingerprint_seen=record.dataset_fingerprint if record is not None else "",
        deleted=number is not None and experiment.dataset_version_number is not None
        and (pinned is None or pinned.deleted_at is not None),
    )


def _environment_link(*, experiment: Experiment,
                      record: TrialLineage | None) -> EnvironmentLink | None:
    environment, revision = experiment.environment, experiment.environment_revision
    newest = (EnvironmentRevision.objects.filter(environment=environment)
              .order_by("-number").values_list("number", flat=True).first()
              if environment is not None else None)
    if record is not None:
        if not record.environment_name:
            return None  # the node's own runtime
        return EnvironmentLink(
            name=record.environment_name, environment_id=experiment.environment_id,
            revision=record.environment_revision, content_hash=record.environment_hash,
            image=record.image, tensorflow_version=record.tensorflow_requested,
            packages=list(record.packages), packages_resolved=record.packages_resolved,
            build_key=record.build_key, current_revision=newest)
    if environment is None:
        return None
    return EnvironmentLink(
        name=environment.name, environment_id=environment.pk,
        revision=revision.number if revision is not None else None,
        content_hash=revision.content_hash if revision is not None else "",
        image=revision.image if revision is not None else environment.image,
        tensorflow_version=(revision.tensorflow_version if revision is not None
                            else environment.tensorflow_version),
        packages=list(revision.packages if revision is not None else environment.extra_packages),
        packages_resolved=False, build_key="", current_revision=newest)
