from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tfplatform.cluster.placement import gpu_fraction_of
from tfplatform.core.notes import NOTE_MAX_CHARS, TAG_MAX_CHARS, TAGS_MAX, note_render
from tfplatform.core.serializers import (
    JSONObjectField,
    QuerySerializer,
    StrictInputSerializer,
    TextSlugRelatedField,
)
from tfplatform.experiments.models import Environment
from tfplatform.experiments.selectors.scheduling import (
    experiment_queue_position,
    pending_reason_shown,
)
from tfplatform.experiments.serializers import ResourcesSerializer
from tfplatform.searches.models import Search, SearchTrial
from tfplatform.searches.selectors import SearchQuery


class SearchCreateSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=200)
    model = serializers.CharField(max_length=300)
    dataset = serializers.CharField(max_length=300)
    searcher = serializers.ChoiceField(choices=Search.Searcher.choices)
    space = JSONObjectField(
        help_text="Per hyperparameter, a list of values {values: [...]} or a range {low, high, "
                  "type?: int|float, log?: bool, step?: int}; e.g. {learning_rate: {low: 1e-4, "
                  "high: 0.1, log: true}, hidden_units: {values: [32, 64, 128]}}.")
    metric = serializers.CharField(required=False, default="val_accuracy", max_length=100)
    mode = serializers.ChoiceField(required=False, default="", allow_blank=True,
                                   choices=["min", "max"])
    max_trials = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=1_000,
        help_text="Grid: every point when absent; random and adaptive: 10.")
    max_concurrent = serializers.IntegerField(required=False, default=2, min_value=1,
                                              max_value=64)
    max_epochs = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=10_000,
        help_text="Every trial's epochs (adaptive: the last rung's); the hyperparameters' epochs "
                  "when absent.")
    grace_period = serializers.IntegerField(
        required=False, default=1, min_value=1, max_value=10_000,
        help_text="Adaptive: the epochs every trial trains before the first rung.")
    reduction_factor = serializers.IntegerField(
        required=False, default=3, min_value=2, max_value=100,
        help_text="Adaptive: the best 1/reduction_factor of a rung go on, to reduction_factor "
                  "times as many epochs.")
    seed = serializers.IntegerField(required=False, default=0, min_value=0, max_value=2**31 - 1)
    hyperparameters = JSONObjectField(required=False, default=dict)
    resources = JSONObjectField(required=False, default=dict)
    max_restarts = serializers.IntegerField(required=False, default=3, min_value=0, max_value=100)
    priority = serializers.IntegerField(required=False, default=0, min_value=-100, max_value=100)
    environment = TextSlugRelatedField(
        slug_field="name", queryset=Environment.objects.all(), required=False, allow_null=True,
        max_length=Environment._meta.get_field("name").max_length or 100,
    )

    def validate_resources(self, value: dict[str, Any]) -> dict[str, Any]:
        resources = ResourcesSerializer(data=value)
        resources.is_valid(raise_exception=True)
        return dict(resources.validated_data)


class SearchTrialSerializer(serializers.ModelSerializer):
    experiment = serializers.IntegerField(source="experiment_id")
    state = serializers.CharField(source="experiment.state",
                                  help_text="Its experiment's state.")
    outcome = serializers.CharField(
        help_text="'' while it trains or waits; stopped (not promoted at a rung), finished, "
                  "failed or canceled.")
    epochs = serializers.SerializerMethodField(help_text="Epochs it has trained so far.")
    best_value = serializers.SerializerMethodField(
        help_text="The best value of the search's metric so far, and its epoch.")
    best_epoch = serializers.SerializerMethodField()
    pending_reason = serializers.SerializerMethodField(
        help_text="Why its experiment waits: the scheduler's reason and its queue position.")
    params = serializers.SerializerMethodField(help_text="Its hyperparameters from the space.")

    class Meta:
        model = SearchTrial
        fields = ["index", "experiment", "params", "state", "outcome", "rung", "rung_values",
                  "epochs", "best_value", "best_epoch", "pending_reason"]

    def get_pending_reason(self, member: SearchTrial) -> str:
        experiment = member.experiment
        return pending_reason_shown(experiment=experiment,
                                    position=experiment_queue_position(experiment=experiment))

    def get_params(self, member: SearchTrial) -> dict[str, Any]:
        return dict(sorted(member.params.items()))

    def _values(self, member: SearchTrial) -> dict[int, float]:
        return dict(self.context.get("values", {}).get(member.experiment_id, {}))

    def _best(self, member: SearchTrial) -> tuple[int, float] | None:
        values = self._values(member)
        if not values:
            return None
        pick = max if member.search.mode == "max" else min
        epoch = pick(values, key=lambda e: values[e])
        return epoch, values[epoch]

    def get_epochs(self, member: SearchTrial) -> int:
        return max(self._values(member), default=0)

    def get_best_value(self, member: SearchTrial) -> float | None:
        best = self._best(member)
        return best[1] if best else None

    def get_best_epoch(self, member: SearchTrial) -> int | None:
        best = self._best(member)
        return best[0] if best else None


class SearchSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    environment = serializers.CharField(source="environment.name", allow_null=True,
                                        default=None)
    resources = serializers.SerializerMethodField()
    space = serializers.SerializerMethodField()
    tags = serializers.SerializerMethodField()

    class Meta:
        model = Search
        fields = ["id", "name", "owner", "state", "end_reason", "searcher", "space", "metric",
                  "mode", "max_trials", "max_concurrent", "max_epochs", "grace_period",
                  "reduction_factor", "seed", "model", "dataset", "environment",
                  "hyperparameters", "resources", "priority", "max_restarts", "created_at",
                  "finished_at", "tags", "archived"]

    def get_tags(self, search: Search) -> list[str]:
        return sorted(tag.name for tag in search.tags.all())

    def get_space(self, search: Search) -> dict[str, Any]:
        return dict(sorted(search.space.items()))

    @extend_schema_field(ResourcesSerializer)
    def get_resources(self, search: Search) -> dict[str, int | str | float | None]:
        return {"workers": search.workers, "gpus_per_worker": search.gpus_per_worker,
                "parameter_servers": search.parameter_servers,
                "gpu_fraction": gpu_fraction_of(milli=search.gpu_milli),
                "gpu_memory_mb": search.gpu_memory_mb, "pool": search.pool,
                "gpu_type": search.gpu_type}


class SearchDetailSerializer(SearchSerializer):
    trials = serializers.SerializerMethodField()
    best_trial = serializers.SerializerMethodField(
        help_text="The index of the completed trial with the best value (deploy-best's).")

    note_html = serializers.SerializerMethodField(
        help_text="The note rendered from Markdown and sanitized: safe to insert as HTML.")

    class Meta(SearchSerializer.Meta):
        fields = [*SearchSerializer.Meta.fields, "trials", "best_trial", "note", "note_html"]

    def get_note_html(self, search: Search) -> str:
        return note_render(note=search.note)

    def get_trials(self, search: Search) -> list[dict[str, Any]]:
        return SearchTrialSerializer(self.context["trials"], many=True,
                                     context=self.context).data  # type: ignore[return-value]

    def get_best_trial(self, search: Search) -> int | None:
        best = self.context.get("best")
        return best.index if best is not None else None


class SearchDeploySerializer(StrictInputSerializer):
    model_name = serializers.CharField(max_length=100)
    tflite = serializers.BooleanField(
        default=False, help_text="Also convert to TF Lite: model.tflite beside the SavedModel, "
        "which the model server then serves for this version.")


class SearchListQuerySerializer(QuerySerializer):
    q = serializers.CharField(required=False, max_length=200,
                              help_text="Words that must each be in the name, a tag or the note")
    tag = serializers.ListField(child=serializers.CharField(max_length=TAG_MAX_CHARS),
                                required=False, max_length=TAGS_MAX,
                                help_text="Carries every one of these tags")
    archived = serializers.ChoiceField(choices=["false", "true", "any"], default="false",
                                       help_text="Archived searches are left out unless asked for")
    owner = serializers.CharField(required=False, max_length=150, help_text="A username")
    state = serializers.MultipleChoiceField(choices=Search.State.choices, required=False)

    def query(self) -> SearchQuery:
        data = self.validated_data
        return SearchQuery(
            text=data.get("q", ""), tags=tuple(t.strip() for t in data.get("tag", ())),
            archived={"false": False, "true": True, "any": None}[data["archived"]],
            owner=data.get("owner", ""), states=tuple(sorted(data.get("state", ()))))


class SearchAnnotateSerializer(StrictInputSerializer):
    tags = serializers.ListField(child=serializers.CharField(allow_blank=True, max_length=1000),
                                 required=False, max_length=TAGS_MAX,
                                 help_text="All its tags (replaces them)")
    note = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                 max_length=NOTE_MAX_CHARS, help_text="Markdown")
    archived = serializers.BooleanField(required=False)
