from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from training.shard_schema import ShardedSource


class Dataset(models.Model):
    """One version of a sharded file dataset, chosen by name (training/shard_schema.py).

    Visible to its owner, its team and staff. Registering a name again within the team (or,
    for a user without one, among the owner's own) adds its next version; an experiment reads
    the newest, or the one it names as `name@version`, and pins it. Its local folders lie in
    its team's folder of a dataset root, or its teamless owner's, or where staff put them
    (locations.py).
    """

    class Format(models.TextChoices):
        TFRECORD = "tfrecord"
        PARQUET = "parquet"
        CSV = "csv"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets"
    )
    # Copied from the owner at registration, like an experiment's, unless staff chose one.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=100)
    version = models.PositiveIntegerField(default=1)
    # Of its shard files at registration (fingerprints.py); empty for one registered before
    # datasets had versions.
    fingerprint = models.CharField(max_length=64, blank=True)
    # Deleted by its holder: gone from lists and submissions, kept so that its number is never
    # given again and the experiments that read it still say which files those were.
    deleted_at = models.DateTimeField(null=True, blank=True)
    format = models.CharField(max_length=20, choices=Format.choices)
    train_uri = models.CharField(max_length=1000)
    validation_uri = models.CharField(max_length=1000)
    # name -> {"dtype", "shape"}; feature_order keeps their order (JSON objects may not).
    features = models.JSONField(default=dict)
    feature_order = models.JSONField(default=list)
    label = models.CharField(max_length=200)
    label_spec = models.JSONField(default=dict)
    pack = models.BooleanField(default=False)
    csv_columns = models.JSONField(default=list, blank=True)
    csv_header = models.BooleanField(default=True)
    train_examples = models.BigIntegerField()
    validation_examples = models.BigIntegerField()
    num_classes = models.PositiveIntegerField(null=True, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "version", "id"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name", "version"],
                                    condition=Q(team__isnull=False),
                                    name="dataset_version_unique_in_team"),
            models.UniqueConstraint(fields=["owner", "name", "version"],
                                    condition=Q(team__isnull=True),
                                    name="dataset_version_unique_for_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    def source(self) -> ShardedSource:
        return ShardedSource.from_dict(self.source_fields())

    def source_fields(self) -> dict[str, Any]:
        return {
            "name": self.name, "format": self.format, "train": self.train_uri,
            "validation": self.validation_uri, "features": self.features,
            "feature_order": self.feature_order, "label": self.label,
            "label_spec": self.label_spec, "train_examples": self.train_examples,
            "validation_examples": self.validation_examples, "num_classes": self.num_classes,
            "size_bytes": self.size_bytes, "pack": self.pack, "csv_columns": self.csv_columns,
            "csv_header": self.csv_header,
        }
