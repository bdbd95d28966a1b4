"""Registering and deleting sharded datasets; the checks run in the web process, TF-free."""

from django.db import IntegrityError, transaction

from tfplatform.accounts.models import User
from tfplatform.core.errors import Conflict, InvalidInput, NotFound
from tfplatform.datasets.inspection import DatasetRequest, source_build
from tfplatform.datasets.locations import location_check
from tfplatform.datasets.models import Dataset
from training.catalog import BUILTIN_DATASETS
from training.shard_schema import FORMATS, SPLITS, ShardedSource

# What the experiment form's `dataset` already means: never a registered dataset's name.
RESERVED_NAMES = (*BUILTIN_DATASETS, "upload")


def dataset_register(*, owner: User, request: DatasetRequest) -> Dataset:
    if request.name in RESERVED_NAMES:
        raise InvalidInput(f"'{request.name}' is a built-in dataset's name.", field="name")
    if request.format not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}.", field="format")
    shards = {split: location_check(uri=getattr(request, split), field=split)
              for split in SPLITS}
    source = source_build(request=DatasetRequest(**{**request.__dict__, "shards": shards}))
    fields = source.to_dict()
    try:
        with transaction.atomic():
            return Dataset.objects.create(
                owner=owner, team_id=owner.team_id, name=source.name, format=source.format,
                train_uri=source.train, validation_uri=source.validation,
                features=fields["features"], feature_order=fields["feature_order"],
                label=source.label, label_spec=source.label_spec, pack=source.pack,
                csv_columns=fields["csv_columns"], csv_header=source.csv_header,
                train_examples=source.train_examples,
                validation_examples=source.validation_examples,
                num_classes=source.num_classes, size_bytes=source.size_bytes,
            )
    except IntegrityError as error:
        raise Conflict(f"A dataset named '{request.name}' is already registered "
                       f"{'in your team' if owner.team_id else 'by you'}.") from error


def dataset_delete(*, user: User, dataset: Dataset) -> None:
    """Its owner, a member of its team or staff; the files stay (they are not the platform's).
    Experiments already submitted keep their copy of its description."""
    allowed = (user.is_staff or dataset.owner_id == user.pk
               or (dataset.team_id is not None and dataset.team_id == user.team_id))
    if not allowed:
        raise NotFound("Dataset not found.")
    dataset.delete()


def dataset_source_for_trials(*, dataset: Dataset) -> ShardedSource:
    """The source an experiment will read, its folders checked again now: the files may have
    moved (or a link appeared) since it was registered."""
    source = dataset.source()
    for split in SPLITS:
        location_check(uri=getattr(source, split), field="dataset")
    return source
