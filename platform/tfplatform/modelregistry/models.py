from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

# TF Serving model names become directory names under the model base path.
model_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
    "Use letters, digits, '.', '_' or '-', starting with a letter or digit.",
)


class RegisteredModel(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[model_name_validator])
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="registered_models"
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    public = models.BooleanField(default=False)
    # Share of inference requests routed to the version labelled "canary" (0..100).
    canary_percent = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        LOADING = "loading"
        AVAILABLE = "available"
        FAILED = "failed"
        UNLOADED = "unloaded"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    source_experiment = models.ForeignKey(
        "experiments.Experiment",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="model_versions",
    )
    path = models.CharField(max_length=500)
    # What its files take on disk (its owner's storage quota); 0 once they are removed.
    size_bytes = models.BigIntegerField(default=0)
    # Its serving signatures as read at publish: inputs and outputs with dtype and shape.
    signatures = models.JSONField(default=dict, blank=True)
    # A model.tflite converted by the platform sits beside the SavedModel, and is what the
    # embedded model server (--prefer_tflite_model) serves for this version.
    tflite = models.BooleanField(default=False)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model__name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["model", "version"], name="model_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}:{self.version}"


class ModelLabel(models.Model):
    """A movable name (stable, canary) pointing at one version of a model."""

    class Name(models.TextChoices):
        STABLE = "stable"
        CANARY = "canary"

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="labels")
    label = models.CharField(max_length=50, choices=Name.choices)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="labels")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "label"]
        constraints = [
            models.UniqueConstraint(fields=["model", "label"], name="model_label_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}@{self.label}"


class ServingSample(models.Model):
    """The model server's own cumulative request metrics for one model, or one of its
    versions, at one scrape. Rates and quantiles come from the differences between samples."""

    model = models.ForeignKey(
        RegisteredModel, on_delete=models.CASCADE, related_name="serving_samples"
    )
    # None: the whole model, from TF Serving's request_count and request_latency (per model
    # name). A version: from the embedded server's per-version families, which a stock
    # tensorflow/serving does not have.
    version = models.PositiveIntegerField(null=True, blank=True)
    # Not auto_now_add: pruning and tests set the time explicitly.
    recorded_at = models.DateTimeField(db_index=True)
    requests_ok = models.FloatField(default=0)
    requests_failed = models.FloatField(default=0)
    # Cumulative request_latency bucket counts of succeeded requests, {"<le µs>": count},
    # summed over API and entrypoint.
    latency_buckets = models.JSONField(default=dict)

    class Meta:
        ordering = ["recorded_at", "id"]
        indexes = [models.Index(fields=["model", "recorded_at"])]

    def __str__(self) -> str:
        which = self.model.name if self.version is None else f"{self.model.name}/{self.version}"
        return f"{which}@{self.recorded_at:%Y-%m-%d %H:%M:%S}"
