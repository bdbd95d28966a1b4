"""Registering and deleting sharded datasets; the checks run in the web process, TF-free."""

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from tfplatform.accounts.models import Team, User
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import audit_record, audit_snapshot
from tfplatform.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from tfplatform.datasets.fingerprints import shards_fingerprint
from tfplatform.datasets.inspection import DatasetRequest, source_build
from tfplatform.datasets.locations import dataset_locations_check, location_check
from tfplatform.datasets.models import Dataset
from training.catalog import BUILTIN_DATASETS
from training.shard_schema import FORMATS, SPLITS, ShardedSource

# What the experiment form's `dataset` already means: never a registered dataset's name.
RESERVED_NAMES = (*BUILTIN_DATASETS, "upload")
# What an audit row shows of a dataset version registered or deleted for someone else.
AUDIT_FIELDS = ("name", "version", "owner", "team", "train_uri", "validation_uri",
                "fingerprint")


def dataset_register(*, user: User, request: DatasetRequest, owner_name: str = "",
                     team_name: str = "") -> Dataset:
    """Registers a dataset held by `user` and their team, or, set by staff, by another owner
    (`owner_name`) or team (`team_name`; default the owner's team). A name its holder has
    registered before gets its next version: 1, 2, ..., never a deleted one's number.

    `user` is who acts: registered for a holder other than themselves and their team, it is an
    audit row."""
    if request.name in RESERVED_NAMES:
        raise InvalidInput(f"'{request.name}' is a built-in dataset's name.", field="name")
    if request.format not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}.", field="format")
    owner, team = _holder(user=user, owner_name=owner_name, team_name=team_name)
    shards = {split: location_check(uri=getattr(request, split), field=split, owner=owner,
                                    team=team, staff=user.is_staff)
              for split in SPLITS}
    source = source_build(request=DatasetRequest(**{**request.__dict__, "shards": shards}))
    fields = source.to_dict()
    fingerprint = shards_fingerprint(
        splits={split: (getattr(request, split), shards[split]) for split in SPLITS})
    holder = Q(team=team) if team is not None else Q(team__isnull=True, owner=owner)
    try:
        with transaction.atomic():
            # Locked: two registrations of one name at once take turns for its next number.
            newest = (Dataset.objects.select_for_update().filter(holder, name=source.name)
                      .order_by("-version").first())
            dataset = Dataset.objects.create(
                owner=owner, team=team, name=source.name, format=source.format,
                version=newest.version + 1 if newest is not None else 1,
                fingerprint=fingerprint,
                train_uri=source.train, validation_uri=source.validation,
                features=fields["features"], feature_order=fields["feature_order"],
                label=source.label, label_spec=source.label_spec, pack=source.pack,
                csv_columns=fields["csv_columns"], csv_header=source.csv_header,
                train_examples=source.train_examples,
                validation_examples=source.validation_examples,
                num_classes=source.num_classes, size_bytes=source.size_bytes,
            )
            if owner.pk != user.pk or (team.pk if team is not None else None) != user.team_id:
                audit_record(actor=user, action=AuditAction.DATASET_REGISTER, target=dataset,
                             before=None, after=audit_snapshot(obj=dataset, fields=AUDIT_FIELDS))
            return dataset
    except IntegrityError as error:  # its first version, registered twice at once
        raise Conflict(f"Dataset '{request.name}' was registered meanwhile "
                       f"{'in the team' if team is not None else 'by its owner'}; register "
                       "it again for its next version.") from error


def _holder(*, user: User, owner_name: str, team_name: str) -> tuple[User, Team | None]:
    if not owner_name and not team_name:
        return user, user.team
    if not user.is_staff:
        raise Forbidden("Only staff may register a dataset for another owner or team.")
    owner = User.objects.select_related("team").filter(username=owner_name).first() \
        if owner_name else user
    if owner is None:
        raise InvalidInput(f"No user is named '{owner_name}'.", field="owner")
    if not team_name:
        return owner, owner.team
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        raise InvalidInput(f"No team is named '{team_name}'.", field="team")
    return owner, team


def dataset_delete(*, user: User, dataset: Dataset) -> None:
    """Its owner, a member of its team or staff delete one version; the files stay (they are
    not the platform's). Its row stays, marked, for the experiments that read it: they can say
    which version they read, and a reproduction that it is gone.

    `user` is who acts: deleted by someone other than its owner (staff, a teammate), it is an
    audit row; deleted already, it is neither deleted again nor recorded."""
    allowed = (user.is_staff or dataset.owner_id == user.pk
               or (dataset.team_id is not None and dataset.team_id == user.team_id))
    if not allowed:
        raise NotFound("Dataset not found.")
    with transaction.atomic():
        deleted = Dataset.objects.filter(pk=dataset.pk, deleted_at__isnull=True).update(
            deleted_at=timezone.now())
        if deleted and dataset.owner_id != user.pk:
            audit_record(actor=user, action=AuditAction.DATASET_DELETE, target=dataset,
                         before=audit_snapshot(obj=dataset, fields=AUDIT_FIELDS), after=None)


def dataset_source_for_trials(*, dataset: Dataset) -> ShardedSource:
    """The source an experiment will read, its folders checked again now: the files may have
    moved (or a link appeared, or the folder become another team's) since it was
    registered."""
    dataset_locations_check(dataset=dataset)
    return dataset.source()
