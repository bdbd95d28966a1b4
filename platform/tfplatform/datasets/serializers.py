from rest_framework import serializers

from tfplatform.core.serializers import JSONObjectField, StrictInputSerializer
from tfplatform.datasets.models import Dataset
from training.shard_schema import DTYPES, FORMATS

URI_HELP = ("A folder of shards, a glob or one file: an absolute path in your team's folder of "
            "a dataset root (<root>/<team>/..., or <root>/users/<username>/... without a team; "
            "PLATFORM_DATASET_ROOTS), or gs://, s3://, hdfs:// where the nodes can read them.")
SPEC_HELP = (f'{{"dtype": one of {", ".join(DTYPES)}, "shape": [sizes]}}; '
             '[] for one value per example.')


class DatasetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    team = serializers.CharField(source="team.name", read_only=True, allow_null=True)
    train = serializers.CharField(source="train_uri")
    validation = serializers.CharField(source="validation_uri")
    features = serializers.DictField(child=serializers.DictField())
    feature_order = serializers.ListField(child=serializers.CharField())
    label_spec = serializers.DictField()
    csv_columns = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = Dataset
        fields = [
            "id", "name", "version", "fingerprint", "owner", "team", "format", "train",
            "validation", "features", "feature_order", "label", "label_spec", "pack",
            "csv_columns", "csv_header", "train_examples", "validation_examples", "num_classes",
            "size_bytes", "created_at",
        ]
        read_only_fields = fields


class DatasetCreateSerializer(StrictInputSerializer):
    name = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,99}$", max_length=100,
        help_text="Chosen by it as an experiment's `dataset` (its newest version) or as "
                  "`name@version`. Registering a name your team (or you, without one) already "
                  "has adds its next version.",
    )
    format = serializers.ChoiceField(choices=FORMATS)
    train = serializers.CharField(max_length=1000, help_text=URI_HELP)
    validation = serializers.CharField(max_length=1000, help_text=URI_HELP)
    # A serializer's own `label` attribute is its title; DRF's metaclass takes this as a field.
    label = serializers.CharField(  # type: ignore[assignment]
        max_length=200, help_text="The label's column or feature."
    )
    features = JSONObjectField(
        required=False,
        help_text=f"name -> {SPEC_HELP} Parquet and CSV: every other column when left out.",
    )
    feature_order = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=10_000,
        help_text="The features' order (packing, model inputs); default: as given.",
    )
    label_spec = JSONObjectField(required=False, help_text=SPEC_HELP + " Parquet: its column's.")
    pack = serializers.BooleanField(
        default=False, help_text="Concatenate every feature into one float32 vector."
    )
    num_classes = serializers.IntegerField(
        required=False, allow_null=True, min_value=2, max_value=1_000_000,
        help_text="Classes of an integer label; Parquet: its largest value + 1 by default. "
                  "Left out for regression.",
    )
    train_examples = serializers.IntegerField(
        required=False, min_value=0, max_value=2**62,
        help_text="Required for TFRecord and CSV; Parquet: counted from the files' metadata.",
    )
    validation_examples = serializers.IntegerField(required=False, min_value=0, max_value=2**62)
    size_bytes = serializers.IntegerField(
        required=False, min_value=0, max_value=2**62,
        help_text="Remote URIs only; local files are measured.",
    )
    csv_columns = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=10_000,
        help_text="CSV: every column in file order; default: the first shard's header.",
    )
    csv_header = serializers.BooleanField(default=True)
    owner = serializers.CharField(
        required=False, max_length=150,
        help_text="Staff only: the username of the dataset's owner (default: you).",
    )
    team = serializers.CharField(
        required=False, max_length=100,
        help_text="Staff only: the name of the team that holds it (default: the owner's).",
    )
