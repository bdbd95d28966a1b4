"""The experiments list's search parameters, and the endpoints that tag, note and archive."""

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.conditions import Condition, condition_parse
from tfplatform.core.errors import PlatformError
from tfplatform.core.notes import NOTE_MAX_CHARS, TAG_MAX_CHARS, TAGS_MAX
from tfplatform.core.serializers import QuerySerializer, StrictInputSerializer
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.search import (
    ExperimentQuery,
    experiment_ordering_check,
    experiment_tag_counts,
)
from tfplatform.experiments.services.annotations import (
    BULK_MAX,
    experiments_bulk_change,
)

CONDITIONS_MAX = 20


def _conditions(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.CharField(max_length=400), required=False, max_length=CONDITIONS_MAX,
        help_text=help_text)


class ExperimentSearchQuerySerializer(QuerySerializer):
    """The list's query string: each parameter narrows it; repeat a list one to narrow more."""

    q = serializers.CharField(required=False, max_length=200,
                              help_text="Words that must each be in the name, a tag or the note")
    owner = serializers.CharField(required=False, max_length=150, help_text="A username")
    team = serializers.CharField(required=False, max_length=100, help_text="A team's name")
    state = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=10,
        help_text="Any of these states; comma lists too (state=queued,running)")
    dataset = serializers.CharField(required=False, max_length=300)
    environment = serializers.CharField(required=False, max_length=100)
    model = serializers.CharField(required=False, max_length=300)
    tag = serializers.ListField(
        child=serializers.CharField(max_length=TAG_MAX_CHARS), required=False,
        max_length=TAGS_MAX, help_text="Carries every one of these tags")
    archived = serializers.ChoiceField(
        choices=["false", "true", "any"], required=False, default="false",
        help_text="Archived experiments are left out unless asked for")
    hp = _conditions("Hyperparameter conditions, NAME OP VALUE: lr<0.01, optimizer=adam; "
                     "repeat for ranges (hp=lr>=0.001&hp=lr<0.01)")
    final = _conditions("On a metric's last epoch value: val_accuracy>=0.9")
    best = _conditions("On a metric's best epoch value (highest for accuracy-like names, "
                       "lowest for losses and errors): val_loss<0.3")
    ordering = serializers.CharField(
        required=False, max_length=120,
        help_text="id, name, state, created_at, started_at, finished_at, priority, "
                  "final.METRIC, best.METRIC or hp.NAME; -NAME descending; missing values last")

    def validate_state(self, value: list[str]) -> list[str]:
        states = [s.strip() for item in value for s in item.split(",")]
        unknown = [s for s in states if s not in Experiment.State.values]
        if unknown:
            raise serializers.ValidationError(
                f"Not a state: {unknown[0][:40]!r}; one of {', '.join(Experiment.State.values)}.")
        return states

    def validate_ordering(self, value: str) -> str:
        return _field_checked(lambda: experiment_ordering_check(ordering=value))

    def validate_hp(self, value: list[str]) -> list[Condition]:
        return [_condition(text=text, field="hp") for text in value]

    def validate_final(self, value: list[str]) -> list[Condition]:
        return [_condition(text=text, field="final") for text in value]

    def validate_best(self, value: list[str]) -> list[Condition]:
        return [_condition(text=text, field="best") for text in value]

    def query(self) -> ExperimentQuery:
        data = self.validated_data
        return ExperimentQuery(
            text=data.get("q", ""), owner=data.get("owner", ""), team=data.get("team", ""),
            states=tuple(data.get("state", ())), dataset=data.get("dataset", ""),
            environment=data.get("environment", ""), model=data.get("model", ""),
            tags=tuple(t.strip() for t in data.get("tag", ())),
            archived={"false": False, "true": True, "any": None}[data["archived"]],
            hyperparameters=tuple(data.get("hp", ())), final=tuple(data.get("final", ())),
            best=tuple(data.get("best", ())), ordering=data.get("ordering", ""),
        )


def _condition(*, text: str, field: str) -> Condition:
    return _field_checked(
        lambda: condition_parse(text=text, field=field, numbers_only=field != "hp"))


def _field_checked(check: Any) -> Any:
    """A business check's error as the field error a query parameter's should be."""
    try:
        return check()
    except PlatformError as error:
        raise serializers.ValidationError(error.message) from error


class ExperimentAnnotateSerializer(StrictInputSerializer):
    tags = serializers.ListField(child=serializers.CharField(allow_blank=True, max_length=1000,
                                                            trim_whitespace=False),
                                 required=False, max_length=TAGS_MAX,
                                 help_text="All its tags (replaces them)")
    note = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                 max_length=NOTE_MAX_CHARS, help_text="Markdown")
    archived = serializers.BooleanField(required=False)


class ExperimentBulkSerializer(StrictInputSerializer):
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**62),
                                min_length=1, max_length=BULK_MAX)
    action = serializers.ChoiceField(choices=["tag", "untag", "archive", "unarchive"])
    tags = serializers.ListField(child=serializers.CharField(allow_blank=True, max_length=1000),
                                 required=False, default=list, max_length=TAGS_MAX)


class ExperimentBulkApi(APIView):
    """Tag, untag, archive or unarchive many at once: all of them, or (404) none."""

    @extend_schema(request=ExperimentBulkSerializer, responses={
        200: inline_serializer("ExperimentBulk", {"changed": serializers.IntegerField()}),
        404: OpenApiResponse(description="Some of the ids are not experiments you can see: "
                                         "nothing changed."),
    })
    def post(self, request: Request) -> Response:
        serializer = ExperimentBulkSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changed = experiments_bulk_change(user=request.user, **serializer.validated_data)
        return Response({"changed": changed}, status=status.HTTP_200_OK)


class ExperimentTagListApi(APIView):
    """The tags on the experiments you can see, with how many carry each."""

    @extend_schema(responses=inline_serializer(
        "ExperimentTagCount", {"name": serializers.CharField(),
                               "count": serializers.IntegerField()}, many=True))
    def get(self, request: Request) -> Response:
        return Response(list(experiment_tag_counts(user=request.user)))

