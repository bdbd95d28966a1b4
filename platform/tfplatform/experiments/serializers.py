from datetime import datetime
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.reverse import reverse

from tfplatform.cluster.placement import gpu_fraction_of
from tfplatform.core.notes import note_render
from tfplatform.core.serializers import (
    JSONObjectField,
    StrictInputSerializer,
    TextSlugRelatedField,
)
from tfplatform.experiments.models import Environment, EnvironmentBuild, Experiment, Metric, Trial
from tfplatform.experiments.selectors.experiments import (
    LOG_TAIL_MAX,
    METRIC_POINTS_DEFAULT,
    METRIC_POINTS_MAX,
    experiment_unisolated_nodes,
)
from tfplatform.experiments.selectors.scheduling import (
    experiment_queue_position,
    experiments_queue_positions,
    pending_reason_shown,
)


class ResourcesSerializer(StrictInputSerializer):
    workers = serializers.IntegerField(default=1)
    gpus_per_worker = serializers.IntegerField(default=0)
    parameter_servers = serializers.IntegerField(default=0)
    gpu_fraction = serializers.FloatField(
        required=False, allow_null=True, default=None,
        help_text="Instead of whole GPUs: each worker gets this share of one GPU (above 0, below "
                  "1: 0.25, 0.5); TensorFlow's memory on it is limited to the share.")
    gpu_memory_mb = serializers.IntegerField(
        default=0, min_value=0, max_value=10_000_000,
        help_text="Instead of whole GPUs: each worker gets this much of one GPU's memory.")
    pool = serializers.CharField(default="", allow_blank=True, max_length=63,
                                 help_text="Only nodes of this pool (empty: any).")
    gpu_type = serializers.CharField(
        default="", allow_blank=True, max_length=100,
        help_text="Only GPUs of this type, as the cluster page names them (empty: any).")


class ExperimentResourcesSerializer(ResourcesSerializer):
    min_workers = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="Elastic: the fewest workers it may run at (`workers` is the most, which the "
                  "global batch is defined for); sizes whose replicas divide the largest's.")
    min_gpus_per_worker = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="Elastic: the fewest GPUs per worker it may run at (`gpus_per_worker` is the "
                  "most). A smaller size keeps the global batch with gradient accumulation.")


class TargetSerializer(StrictInputSerializer):
    metric = serializers.CharField(required=False, allow_blank=True, max_length=100)
    mode = serializers.ChoiceField(required=False, allow_blank=True, choices=["min", "max"])
    value = serializers.FloatField(required=False, allow_null=True)


class TargetOutputSerializer(serializers.Serializer):
    metric = serializers.CharField()
    mode = serializers.CharField()
    value = serializers.FloatField(allow_null=True)


class ExperimentCreateSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=200)
    model = serializers.CharField(max_length=300)
    dataset = serializers.CharField(max_length=300)
    hyperparameters = JSONObjectField(required=False, default=dict)
    resources = JSONObjectField(required=False, default=dict)
    target_accuracy = serializers.FloatField(
        required=False, allow_null=True, min_value=0.0, max_value=1.0,
        help_text="Shorthand for target {metric: val_accuracy, mode: max, value}.",
    )
    target = JSONObjectField(
        required=False, default=dict,
        help_text="The metric that picks the best epoch and, with a value, the target whose "
                  "time to reach is reported: {metric: val_mae, mode: min, value: 0.5}. The "
                  "metric defaults to val_accuracy, the mode to min for losses and errors "
                  "(loss, mae, mse, ...) and max otherwise.",
    )
    max_restarts = serializers.IntegerField(required=False, default=3, min_value=0, max_value=100)
    priority = serializers.IntegerField(required=False, default=0, min_value=-100, max_value=100)
    environment = TextSlugRelatedField(
        slug_field="name", queryset=Environment.objects.all(), required=False, allow_null=True,
        max_length=Environment._meta.get_field("name").max_length or 100,
    )
    model_file = serializers.FileField(required=False)
    dataset_file = serializers.FileField(required=False)

    def validate_resources(self, value: dict[str, Any]) -> dict[str, Any]:
        resources = ExperimentResourcesSerializer(data=value)
        resources.is_valid(raise_exception=True)
        return dict(resources.validated_data)

    def validate_target(self, value: dict[str, Any]) -> dict[str, Any]:
        target = TargetSerializer(data=value)
        target.is_valid(raise_exception=True)
        return dict(target.validated_data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """As the service's keywords: target_metric, target_mode, target_value."""
        target = attrs.pop("target", {})
        accuracy = attrs.pop("target_accuracy", None)
        if target and accuracy is not None:
            raise serializers.ValidationError(
                {"target": ["Give target or target_accuracy, not both."]}
            )
        if accuracy is not None:
            target = {"metric": "val_accuracy", "mode": "max", "value": accuracy}
        return {**attrs, **{f"target_{key}": value for key, value in target.items()}}


class EnvironmentBuildSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.hostname")

    class Meta:
        model = EnvironmentBuild
        fields = ["node", "state", "started_at", "finished_at"]


class EnvironmentSerializer(serializers.ModelSerializer):
    builds = EnvironmentBuildSerializer(
        many=True, read_only=True, help_text="Its venv on each node that has needed it."
    )

    class Meta:
        model = Environment
        fields = [
            "id",
            "name",
            "image",
            "tensorflow_version",
            "gpu_capable",
            "extra_packages",
            "builds",
        ]


class EnvironmentWriteSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=100)
    image = serializers.CharField(max_length=300)
    tensorflow_version = serializers.CharField(max_length=20)
    gpu_capable = serializers.BooleanField(default=False)
    extra_packages = serializers.ListField(
        child=serializers.CharField(max_length=200),
        default=list,
        max_length=100,
        help_text="Pinned requirements such as pyjokes==0.8.3, installed as wheels only.",
    )


class TrialSerializer(serializers.ModelSerializer):
    class Meta:
        model = Trial
        fields = [
            "id",
            "restart_count",
            "state",
            "exit_reason",
            "exit_code",
            "retryable",
            "placement",
            "runtime",
            "tensorflow_version",
            "created_at",
            "started_at",
            "first_step_at",
            "finished_at",
            "workers",
            "gpus_per_worker",
            "stop_reason",
            "stop_detail",
        ]


class SizeSerializer(serializers.Serializer):
    workers = serializers.IntegerField()
    gpus_per_worker = serializers.IntegerField()


class _ExperimentListSerializer(serializers.ListSerializer):
    """Queue positions for the whole page in one query (selectors: experiments_queue_positions)."""

    def to_representation(self, data: Any) -> list[Any]:
        items = list(data.all() if hasattr(data, "all") else data)
        # The root's context, which every child reads (a page is always a root here).
        context = cast(dict[str, Any], self.context)
        context[QUEUE_POSITIONS] = experiments_queue_positions(
            experiment_ids=[e.pk for e in items if e.state == Experiment.State.QUEUED])
        return super().to_representation(items)


QUEUE_POSITIONS = "queue_positions"


class ExperimentSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    pending_reason = serializers.SerializerMethodField(
        help_text="Why it waits: the scheduler's reason and, while queued, its queue position.")
    queue_position = serializers.SerializerMethodField(
        help_text="1 for the experiment the scheduler considers next; null unless queued.")
    environment = serializers.CharField(source="environment.name", allow_null=True, default=None)
    resources = serializers.SerializerMethodField()
    first_step_at = serializers.SerializerMethodField()
    size = serializers.SerializerMethodField(
        help_text="The size its latest trial runs (or ran) at; an elastic experiment's changes "
                  "as it is shrunk and grown. Null before its first trial.")
    trials = TrialSerializer(many=True)
    tags = serializers.SerializerMethodField()
    target = serializers.SerializerMethodField()
    target_accuracy = serializers.SerializerMethodField(
        help_text="The target value when the target metric is val_accuracy, else null."
    )

    class Meta:
        model = Experiment
        list_serializer_class = _ExperimentListSerializer
        fields = [
            "id",
            "name",
            "owner",
            "state",
            "model",
            "dataset",
            "hyperparameters",
            "resources",
            "environment",
            "priority",
            "target",
            "target_accuracy",
            "max_restarts",
            "strategy",
            "strategy_reason",
            "pending_reason",
            "queue_position",
            "error",
            "results",
            "created_at",
            "started_at",
            "first_step_at",
            "finished_at",
            "size",
            "trials",
            "tags",
            "archived",
        ]

    def get_tags(self, experiment: Experiment) -> list[str]:
        # Sorted in Python: a page prefetches them (`tags`), and order_by would query again.
        return sorted(tag.name for tag in experiment.tags.all())

    def get_queue_position(self, experiment: Experiment) -> int | None:
        positions = self.context.get(QUEUE_POSITIONS)
        if positions is None:  # one experiment, not a page
            return experiment_queue_position(experiment=experiment)
        return positions.get(experiment.pk)

    def get_pending_reason(self, experiment: Experiment) -> str:
        return pending_reason_shown(experiment=experiment,
                                    position=self.get_queue_position(experiment))

    def get_first_step_at(self, experiment: Experiment) -> datetime | None:
        """The first trial's first training step: how long the submitter waited to see training."""
        steps = [t.first_step_at for t in experiment.trials.all() if t.first_step_at]
        return min(steps, default=None)

    @extend_schema_field(SizeSerializer(allow_null=True))
    def get_size(self, experiment: Experiment) -> dict[str, int] | None:
        trials = list(experiment.trials.all())  # prefetched by the views
        if not trials:
            return None
        size = max(trials, key=lambda t: t.restart_count).size
        return {"workers": size.workers, "gpus_per_worker": size.gpus_per_worker}

    @extend_schema_field(TargetOutputSerializer)
    def get_target(self, experiment: Experiment) -> dict[str, Any]:
        return {"metric": experiment.target_metric, "mode": experiment.target_mode,
                "value": experiment.target_value}

    def get_target_accuracy(self, experiment: Experiment) -> float | None:
        return experiment.target_value if experiment.target_metric == "val_accuracy" else None

    @extend_schema_field(ExperimentResourcesSerializer)
    def get_resources(self, experiment: Experiment) -> dict[str, int | str | float | None]:
        return {
            "workers": experiment.workers,
            "gpus_per_worker": experiment.gpus_per_worker,
            "min_workers": experiment.workers_min or None,
            "min_gpus_per_worker": experiment.gpus_per_worker_min or None,
            "parameter_servers": experiment.parameter_servers,
            "gpu_fraction": gpu_fraction_of(milli=experiment.gpu_milli),
            "gpu_memory_mb": experiment.gpu_memory_mb,
            "pool": experiment.pool,
            "gpu_type": experiment.gpu_type,
        }


class ExperimentDetailSerializer(ExperimentSerializer):
    isolated = serializers.SerializerMethodField(
        help_text="False when a trial ran on a node without isolation (process runtime)."
    )

    tensorboard_url = serializers.SerializerMethodField(
        help_text="Opens this experiment's TensorBoard (in a browser signed in to the platform)."
    )

    note_html = serializers.SerializerMethodField(
        help_text="The note rendered from Markdown and sanitized: safe to insert as HTML.")

    # Pinned at submission (GET .../lineage/ has the whole chain).
    dataset_version = serializers.IntegerField(
        source="dataset_version_number", allow_null=True, read_only=True,
        help_text="The registered dataset's version it reads (`dataset` is its name); null for "
                  "a built-in dataset, an upload or a shared file.")
    dataset_fingerprint = serializers.CharField(read_only=True)
    environment_revision = serializers.IntegerField(
        source="environment_revision.number", allow_null=True, default=None, read_only=True,
        help_text="The environment's revision its trials build (its packages then).")
    reproduced_from = serializers.IntegerField(
        source="reproduced_from_id", allow_null=True, read_only=True,
        help_text="The experiment this one reproduces.")

    class Meta(ExperimentSerializer.Meta):
        fields = [*ExperimentSerializer.Meta.fields, "isolated", "tensorboard_url", "note",
                  "note_html", "dataset_version", "dataset_fingerprint", "environment_revision",
                  "reproduced_from"]

    def get_note_html(self, experiment: Experiment) -> str:
        return note_render(note=experiment.note)

    def get_isolated(self, experiment: Experiment) -> bool:
        return not experiment_unisolated_nodes(experiment=experiment)

    def get_tensorboard_url(self, experiment: Experiment) -> str:
        # The page is the web app's (a layer above): reached by its name, never imported.
        url = reverse("experiment-tensorboard", request=self.context.get("request"))
        return f"{url}?ids={experiment.pk}"


class MetricsQuerySerializer(serializers.Serializer):
    name = serializers.CharField(required=False, max_length=100, help_text="Only this metric")
    max_points = serializers.IntegerField(
        required=False, default=METRIC_POINTS_DEFAULT, min_value=2, max_value=METRIC_POINTS_MAX,
        help_text="Each trial's series of each metric thinned to about this many evenly spaced "
                  "points, its first and last among them.",
    )


class LogsQuerySerializer(serializers.Serializer):
    tail = serializers.IntegerField(required=False, min_value=1, max_value=LOG_TAIL_MAX,
                                    help_text="Only the last N lines")


class MetricSerializer(serializers.ModelSerializer):
    trial = serializers.IntegerField(source="trial.restart_count")

    class Meta:
        model = Metric
        fields = ["trial", "name", "step", "epoch", "value", "recorded_at"]
