from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiTypes, extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.errors import InvalidInput, PayloadTooLarge
from tfplatform.core.negotiation import JsonOnlyNegotiation
from tfplatform.core.serializers import StrictInputSerializer
from tfplatform.core.throttling import ScopedWindowRateThrottle
from tfplatform.experiments.lineage_api import LineageSerializer
from tfplatform.experiments.selectors.experiments import experiment_get
from tfplatform.experiments.selectors.lineage import experiment_lineage_visible
from tfplatform.modelregistry.health import WHOLE_MODEL
from tfplatform.modelregistry.inference import InferenceAnswer, inference_forward
from tfplatform.modelregistry.models import ModelVersion, RegisteredModel
from tfplatform.modelregistry.selectors.access import serving_endpoints
from tfplatform.modelregistry.selectors.health import model_versions_serving_health
from tfplatform.modelregistry.selectors.models import (
    model_get,
    model_get_for_change,
    model_label_versions,
    model_version_get,
    model_version_list,
)
from tfplatform.modelregistry.selectors.routes import model_route_get
from tfplatform.modelregistry.services.labels import (
    LABELS,
    model_label_remove,
    model_label_set,
    model_settings_update,
)
from tfplatform.modelregistry.services.publish import (
    experiment_deploy,
    model_register_path,
    model_register_upload,
)
from tfplatform.modelregistry.services.versions import model_version_undeploy


class ModelVersionSerializer(serializers.ModelSerializer):
    model_name = serializers.CharField(source="model.name")
    labels: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="label", many=True, read_only=True
    )
    public = serializers.BooleanField(source="model.public")

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "model_name",
            "version",
            "state",
            "labels",
            "public",
            "source_experiment",
            "error",
            "signatures",
            "tflite",
            "created_at",
        ]


class RegisteredModelSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    labels = serializers.SerializerMethodField()
    versions = serializers.SerializerMethodField()

    class Meta:
        model = RegisteredModel
        # Versions are read before labels (fields are read in this order, each its own query):
        # a version becomes AVAILABLE with its `stable` label in one transaction, so an answer
        # that shows it available shows its label too.
        fields = ["name", "owner", "public", "canary_percent", "versions", "labels", "created_at"]

    def get_labels(self, model: RegisteredModel) -> dict[str, int]:
        return model_label_versions(model=model)

    def get_versions(self, model: RegisteredModel) -> list[dict[str, Any]]:
        return [
            {
                "version": v.version,
                "state": v.state,
                "error": v.error,
                "source_experiment": v.source_experiment_id,
                "signatures": v.signatures,
                "tflite": v.tflite,
                "created_at": v.created_at,
            }
            for v in model.versions.order_by("-version")
        ]


class RegisterSerializer(StrictInputSerializer):
    model_name = serializers.CharField(max_length=100)
    file = serializers.FileField(required=False, help_text="A zip of a SavedModel directory.")
    path = serializers.CharField(
        required=False, help_text="Staff only: a SavedModel on the server."
    )
    tflite = serializers.BooleanField(
        default=False,
        help_text="Also convert to TF Lite: model.tflite beside the SavedModel, which the model "
        "server then serves for this version.",
    )


class ModelVersionListApi(generics.ListAPIView):
    serializer_class = ModelVersionSerializer
    filter_backends: list[Any] = []
    parser_classes = [JSONParser, MultiPartParser]

    def get_queryset(self) -> QuerySet[ModelVersion]:
        return model_version_list(user=self.request.user)

    @extend_schema(request=RegisterSerializer, responses={202: ModelVersionSerializer})
    def post(self, request: Request) -> Response:
        """Bring your own model: register a SavedModel as a new version of a model. The answer
        comes once the copy is checked and published: the version is `loading`, and becomes
        `available` (or `failed`, with `error`) when the model server has loaded it."""
        serializer = RegisterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = request.user
        if bool(data.get("file")) == bool(data.get("path")):
            raise InvalidInput("Send exactly one of file (a zip) or path.")
        if data.get("path"):
            version = model_register_path(
                user=user,  # type: ignore[arg-type]
                model_name=data["model_name"],
                path=data["path"],
                tflite=data["tflite"],
            )
        else:
            version = model_register_upload(
                user=user,  # type: ignore[arg-type]
                model_name=data["model_name"],
                upload=data["file"],
                tflite=data["tflite"],
            )
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_202_ACCEPTED)


class ModelSettingsSerializer(StrictInputSerializer):
    public = serializers.BooleanField(required=False)
    canary_percent = serializers.IntegerField(required=False, min_value=0, max_value=100)


class ModelDetailApi(APIView):
    @extend_schema(responses=RegisteredModelSerializer)
    def get(self, request: Request, name: str) -> Response:
        model = model_get(user=request.user, name=name)
        return Response(RegisteredModelSerializer(model).data)

    @extend_schema(request=ModelSettingsSerializer, responses=RegisteredModelSerializer)
    def patch(self, request: Request, name: str) -> Response:
        model = model_get_for_change(user=request.user, name=name)
        serializer = ModelSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        model = model_settings_update(model=model, **serializer.validated_data,
                                      actor=request.user)
        return Response(RegisteredModelSerializer(model).data)


class HealthSerializer(serializers.Serializer):
    window_seconds = serializers.FloatField()
    requests = serializers.FloatField()
    failed = serializers.FloatField(help_text="Requests that did not succeed.")
    request_rate = serializers.FloatField(help_text="Requests per second.")
    error_rate = serializers.FloatField(allow_null=True, help_text="Failed share, 0..1.")
    p50_ms = serializers.FloatField(allow_null=True)
    p99_ms = serializers.FloatField(allow_null=True)


class VersionHealthSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    health = HealthSerializer()


class ModelHealthSerializer(serializers.Serializer):
    model = serializers.CharField()
    health = HealthSerializer(allow_null=True, help_text="The whole model, all versions.")
    versions = VersionHealthSerializer(
        many=True, help_text="Each version that two scrapes saw answer, newest first. The "
        "embedded model server reports versions; a stock tensorflow/serving does not (its "
        "request metrics carry the model name only), and then this is empty.")


class ModelHealthApi(APIView):
    """Serving health over the last hour, from the model server's own metrics: the whole
    model, and each version where the server reports versions; `health` is null until two
    scrapes reported the model."""

    @extend_schema(responses=ModelHealthSerializer)
    def get(self, request: Request, name: str) -> Response:
        model = model_get(user=request.user, name=name)
        figures = model_versions_serving_health(model=model)
        whole = figures.pop(WHOLE_MODEL, None)
        return Response(ModelHealthSerializer({
            "model": model.name,
            "health": asdict(whole) if whole is not None else None,
            "versions": [{"version": version, "health": asdict(figures[version])}
                         for version in sorted((v for v in figures if v is not None),
                                               reverse=True)],
        }).data)


class LabelSerializer(StrictInputSerializer):
    label = serializers.ChoiceField(choices=LABELS)  # type: ignore[assignment]
    version = serializers.IntegerField(min_value=1)


class ModelLabelApi(APIView):
    @extend_schema(request=LabelSerializer, responses=RegisteredModelSerializer)
    def post(self, request: Request, name: str) -> Response:
        """Promote or roll back: point a label at a version."""
        model = model_get_for_change(user=request.user, name=name)
        serializer = LabelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = model_version_get(
            model=model, version=serializer.validated_data["version"]
        )
        model_label_set(
            model=model, label=serializer.validated_data["label"], version=version,
            actor=request.user,
        )
        return Response(RegisteredModelSerializer(model).data)


class ModelLabelDeleteApi(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, name: str, label: str) -> Response:
        model = model_get_for_change(user=request.user, name=name)
        model_label_remove(model=model, label=label, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelVersionDetailSerializer(ModelVersionSerializer):
    lineage = serializers.SerializerMethodField(
        help_text="What made it: its experiment, the trial, the dataset version, the "
        "environment revision and the module's hash; null without a source experiment, or "
        "for a reader who may not see that experiment (a public model's).")

    class Meta(ModelVersionSerializer.Meta):
        fields = [*ModelVersionSerializer.Meta.fields, "lineage"]

    @extend_schema_field(LineageSerializer(allow_null=True))
    def get_lineage(self, version: ModelVersion) -> dict[str, Any] | None:
        lineage = experiment_lineage_visible(user=self.context["request"].user,
                                             experiment_id=version.source_experiment_id)
        return LineageSerializer(lineage).data if lineage is not None else None


class ModelVersionApi(APIView):
    @extend_schema(responses=ModelVersionDetailSerializer)
    def get(self, request: Request, name: str, version: int) -> Response:
        found = model_version_get(model=model_get(user=request.user, name=name), version=version)
        return Response(ModelVersionDetailSerializer(found, context={"request": request}).data)

    @extend_schema(request=None, responses=ModelVersionSerializer)
    def delete(self, request: Request, name: str, version: int) -> Response:
        model = model_get_for_change(user=request.user, name=name)
        found = model_version_get(model=model, version=version)
        undeployed = model_version_undeploy(version=found, actor=request.user)
        return Response(ModelVersionSerializer(undeployed).data)


class DeploySerializer(StrictInputSerializer):
    model_name = serializers.CharField(max_length=100)
    tflite = serializers.BooleanField(
        default=False,
        help_text="Also convert to TF Lite: model.tflite beside the SavedModel, which the model "
        "server then serves for this version.",
    )


class ExperimentDeployApi(APIView):
    @extend_schema(request=DeploySerializer, responses={202: ModelVersionSerializer})
    def post(self, request: Request, experiment_id: int) -> Response:
        """Publish the experiment's export as a new version, `loading` until the model server
        has it (`GET /api/v1/models/{name}/` shows it `available` or `failed`)."""
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        serializer = DeploySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = experiment_deploy(
            user=request.user,  # type: ignore[arg-type]
            experiment=experiment,
            model_name=serializer.validated_data["model_name"],
            tflite=serializer.validated_data["tflite"],
        )
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_202_ACCEPTED)


def _answer_response(answer: InferenceAnswer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status, content_type="application/json")
    if answer.version is not None:
        response["X-Model-Version"] = str(answer.version)
    if answer.label:
        response["X-Model-Label"] = answer.label
    return response


class _TfServingSchema(AutoSchema):
    def get_operation_id(self) -> str:
        # TF Serving's status path is the model's without its slash: the registry's detail
        # (`/models/{name}/`) would otherwise get the same generated id.
        return f"tf_serving_{super().get_operation_id().replace(':', '')}"


class _TfServingApi(APIView):
    """TF Serving's REST API on a model, through the platform: same JSON in, same JSON out.
    The URL names the call (`call`: serving.client.REST_CALLS)."""

    schema = _TfServingSchema()

    throttle_classes = [ScopedWindowRateThrottle]
    throttle_scope = "inference"
    parser_classes: list[Any] = []
    # Answers (and errors) are JSON only: no content negotiation on the hot path.
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonOnlyNegotiation


class PredictApi(_TfServingApi):
    """TF Serving's REST predict, classify and regress: the version as the URL names it, else
    the canary's share or the stable label's."""

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(
        self, request: Request, name: str, version: int | None = None, label: str | None = None,
        call: str = "predict",
    ) -> HttpResponse:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > settings.PLATFORM.max_predict_bytes:
            # Refused before the body is read or anything reaches the model server.
            raise PayloadTooLarge(
                f"Request body is larger than {settings.PLATFORM.max_predict_bytes} bytes."
            )
        model = model_route_get(user=request.user, name=name)
        return _answer_response(inference_forward(model=model, call=call, version=version,
                                                  label=label, body=request.body))


class ModelStatusApi(_TfServingApi):
    """TF Serving's REST model status and metadata: of every version the server has, of the one
    the URL names, or (metadata) of the stable one."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(
        self, request: Request, name: str, version: int | None = None, label: str | None = None,
        call: str = "status",
    ) -> HttpResponse:
        model = model_route_get(user=request.user, name=name)
        return _answer_response(inference_forward(model=model, call=call, version=version,
                                                  label=label))


class ServingEndpointsSerializer(serializers.Serializer):
    grpc = serializers.CharField(allow_null=True, help_text="host:port of TF Serving's gRPC API")
    rest = serializers.CharField(allow_null=True, help_text="base URL of TF Serving's REST API")


class ServingEndpointsApi(APIView):
    @extend_schema(responses=ServingEndpointsSerializer)
    def get(self, request: Request) -> Response:
        """Where TF Serving's own clients call models directly with your API token (as
        `authorization: Bearer <token>`, gRPC call metadata or an HTTP header): every gRPC and
        REST call of TF Serving's, on the models you may use. Both are null where the model
        server takes no platform tokens (stock TF Serving): call through
        `/api/v1/models/{name}:predict` and the other paths here instead."""
        return Response(ServingEndpointsSerializer(serving_endpoints()).data)
