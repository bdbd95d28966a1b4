from dataclasses import asdict
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from tfplatform.core.permissions import StaffWrites
from tfplatform.experiments import artifacts, environments
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.search_api import (
    ExperimentAnnotateSerializer,
    ExperimentSearchQuerySerializer,
)
from tfplatform.experiments.selectors.environments import environment_get, environment_list
from tfplatform.experiments.selectors.experiments import (
    experiment_get,
    experiment_logs,
    experiment_metrics,
)
from tfplatform.experiments.selectors.search import experiment_search
from tfplatform.experiments.serializers import (
    EnvironmentSerializer,
    EnvironmentWriteSerializer,
    ExperimentCreateSerializer,
    ExperimentDetailSerializer,
    ExperimentSerializer,
    LogsQuerySerializer,
    MetricSerializer,
    MetricsQuerySerializer,
)
from tfplatform.experiments.services import annotations, submission


class ExperimentListCreateApi(generics.ListAPIView):
    serializer_class = ExperimentSerializer
    filter_backends: list[Any] = []
    parser_classes = [JSONParser, MultiPartParser, FormParser]

    @extend_schema(parameters=[ExperimentSearchQuerySerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Experiment]:
        query = ExperimentSearchQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return experiment_search(user=self.request.user, query=query.query()).prefetch_related(
            "trials", "tags")

    @extend_schema(request=ExperimentCreateSerializer, responses={201: ExperimentSerializer})
    def post(self, request: Request) -> Response:
        serializer = ExperimentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(serializer.validated_data)
        resources = data.pop("resources", {})
        experiment = submission.experiment_create(
            owner=request.user,  # type: ignore[arg-type]
            request=submission.ExperimentRequest(**data, **resources),
        )
        return Response(ExperimentSerializer(experiment).data, status=status.HTTP_201_CREATED)


class ExperimentDetailApi(APIView):
    @extend_schema(responses=ExperimentDetailSerializer)
    def get(self, request: Request, experiment_id: int) -> Response:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        return Response(ExperimentDetailSerializer(experiment, context={"request": request}).data)

    @extend_schema(request=ExperimentAnnotateSerializer, responses=ExperimentDetailSerializer,
                   description="Its tags, note and archived flag: whoever can see it may "
                               "change them. Other fields are its run's record and stay.")
    def patch(self, request: Request, experiment_id: int) -> Response:
        serializer = ExperimentAnnotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        experiment = annotations.experiment_annotate(experiment=experiment,
                                                     **serializer.validated_data)
        return Response(ExperimentDetailSerializer(experiment, context={"request": request}).data)


class ExperimentMetricsApi(generics.ListAPIView):
    serializer_class = MetricSerializer
    pagination_class = None
    filter_backends: list[Any] = []

    @extend_schema(parameters=[MetricsQuerySerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Any]:
        query = MetricsQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        experiment = experiment_get(
            user=self.request.user, experiment_id=self.kwargs["experiment_id"]
        )
        return experiment_metrics(
            experiment=experiment, name=query.validated_data.get("name"),
            max_points=query.validated_data["max_points"],
        )


class ExperimentLogsApi(APIView):
    @extend_schema(
        parameters=[LogsQuerySerializer],
        responses=inline_serializer("ExperimentLogs", {"logs": serializers.CharField()}),
    )
    def get(self, request: Request, experiment_id: int) -> Response:
        query = LogsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        return Response({"logs": experiment_logs(
            experiment=experiment, tail_lines=query.validated_data.get("tail"))})


class ArtifactSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    filename = serializers.CharField()
    files = serializers.IntegerField()
    size_bytes = serializers.IntegerField(help_text="The zip's size, as Content-Length says.")
    url = serializers.CharField()


class ExperimentArtifactListApi(APIView):
    """What a finished experiment leaves to download (none before it finished)."""

    @extend_schema(responses=ArtifactSerializer(many=True))
    def get(self, request: Request, experiment_id: int) -> Response:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        found = artifacts.artifacts_list(experiment=experiment)
        return Response([
            {**asdict(artifact), "url": reverse(
                "api-experiment-artifact", args=[experiment.pk, artifact.name], request=request)}
            for artifact in found
        ])


class ExperimentArtifactApi(APIView):
    """One artifact as a zip, streamed: `model`, `checkpoints` or `logs`."""

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    def get(self, request: Request, experiment_id: int, name: str) -> StreamingHttpResponse:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        return artifacts.artifact_response(experiment=experiment, name=name)


class ExperimentCancelApi(APIView):
    @extend_schema(request=None, responses=ExperimentSerializer)
    def post(self, request: Request, experiment_id: int) -> Response:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        experiment = submission.experiment_cancel(experiment=experiment, actor=request.user)
        return Response(ExperimentSerializer(experiment).data, status=status.HTTP_202_ACCEPTED)


class EnvironmentListCreateApi(generics.ListAPIView):
    """Every signed-in user lists environments; staff create them."""

    serializer_class = EnvironmentSerializer
    filter_backends: list[Any] = []
    permission_classes = [StaffWrites]

    def get_queryset(self) -> QuerySet[Any]:
        return environment_list()

    @extend_schema(request=EnvironmentWriteSerializer, responses={201: EnvironmentSerializer})
    def post(self, request: Request) -> Response:
        serializer = EnvironmentWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        environment = environments.environment_create(**serializer.validated_data,
                                                      actor=request.user)
        return Response(EnvironmentSerializer(environment).data, status=status.HTTP_201_CREATED)


class EnvironmentDetailApi(APIView):
    """Staff change an environment, or delete one no experiment uses (409 otherwise)."""

    permission_classes = [StaffWrites]

    @extend_schema(responses=EnvironmentSerializer)
    def get(self, request: Request, environment_id: int) -> Response:
        environment = environment_get(environment_id=environment_id)
        return Response(EnvironmentSerializer(environment).data)

    @extend_schema(request=EnvironmentWriteSerializer, responses=EnvironmentSerializer)
    def patch(self, request: Request, environment_id: int) -> Response:
        environment = environment_get(environment_id=environment_id)
        serializer = EnvironmentWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        environment = environments.environment_update(
            environment=environment, **serializer.validated_data, actor=request.user
        )
        return Response(EnvironmentSerializer(environment).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, environment_id: int) -> Response:
        environment = environment_get(environment_id=environment_id)
        environments.environment_delete(environment=environment, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExperimentRestartApi(APIView):
    @extend_schema(
        request=None,
        responses={201: ExperimentSerializer},
        description="Run a finished experiment again as a new experiment with the same "
        "configuration and uploads; 400 while it is still queued or running.",
    )
    def post(self, request: Request, experiment_id: int) -> Response:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        restarted = submission.experiment_restart(
            user=request.user,  # type: ignore[arg-type]
            experiment=experiment,
        )
        return Response(ExperimentSerializer(restarted).data, status=status.HTTP_201_CREATED)
