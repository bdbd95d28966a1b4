"""Lineage and reproduction over the API: an experiment's chain, and "run it again pinned"."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.serializers import StrictInputSerializer
from tfplatform.experiments.selectors.experiments import experiment_get
from tfplatform.experiments.selectors.lineage import experiment_lineage
from tfplatform.experiments.serializers import ExperimentSerializer
from tfplatform.experiments.services.reproduction import experiment_reproduce


class DatasetLinkSerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField(allow_null=True, help_text="Null: a built-in dataset, "
                                       "an upload or a file of the shared folder.")
    dataset_id = serializers.IntegerField(
        allow_null=True, help_text="GET /api/v1/datasets/<id>/; null once deleted, or where "
        "you may not read it.")
    fingerprint = serializers.CharField(help_text="The version's, from its registration.")
    fingerprint_seen = serializers.CharField(
        help_text="Of the files as the trial found them: the registered version's "
        "fingerprint, or an upload's or shared file's sha256.")
    deleted = serializers.BooleanField()
    changed = serializers.BooleanField(
        help_text="The files the trial read were no longer those registered.")


class EnvironmentLinkSerializer(serializers.Serializer):
    name = serializers.CharField()
    environment_id = serializers.IntegerField(allow_null=True)
    revision = serializers.IntegerField(allow_null=True)
    content_hash = serializers.CharField(
        help_text="sha256 of the revision's image, TensorFlow version and pinned packages.")
    image = serializers.CharField()
    tensorflow_version = serializers.CharField(help_text="What the environment asks for.")
    packages = serializers.ListField(child=serializers.CharField())
    packages_resolved = serializers.BooleanField(
        help_text="True: every package pip installed in the trial's venv (its lock); false: "
        "the revision's pinned list.")
    build_key = serializers.CharField(help_text="The node's venv or image it ran in.")
    current_revision = serializers.IntegerField(allow_null=True)
    changed_since = serializers.BooleanField()


class LineageSerializer(serializers.Serializer):
    experiment_id = serializers.IntegerField()
    experiment_name = serializers.CharField()
    owner = serializers.CharField()
    reproduced_from_id = serializers.IntegerField(allow_null=True)
    trial_id = serializers.IntegerField(
        allow_null=True, help_text="The latest trial that recorded what it ran with.")
    trial_attempt = serializers.IntegerField(allow_null=True)
    trial_state = serializers.CharField()
    tensorflow_version = serializers.CharField(help_text="What the trial's tasks loaded.")
    dataset = DatasetLinkSerializer()
    environment = EnvironmentLinkSerializer(allow_null=True)
    module = serializers.CharField()
    module_sha256 = serializers.CharField()
    seed = serializers.IntegerField(allow_null=True)
    nodes = serializers.ListField(child=serializers.CharField())
    recorded_at = serializers.DateTimeField(allow_null=True)


class ReproduceSerializer(StrictInputSerializer):
    allow_changes = serializers.BooleanField(
        default=False, help_text="Run even where something can no longer be pinned, with what "
        "there is now; the answer lists the differences.")


class ReproductionSerializer(serializers.Serializer):
    experiment = ExperimentSerializer()
    pinned = serializers.ListField(child=serializers.CharField())
    changes = serializers.ListField(
        child=serializers.CharField(), help_text="What differs from the original run.")
    notes = serializers.ListField(child=serializers.CharField())


class ExperimentLineageApi(APIView):
    @extend_schema(responses=LineageSerializer)
    def get(self, request: Request, experiment_id: int) -> Response:
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        return Response(LineageSerializer(
            experiment_lineage(user=request.user, experiment=experiment)).data)


class ExperimentReproduceApi(APIView):
    @extend_schema(
        request=ReproduceSerializer,
        responses={201: ReproductionSerializer},
        description="Run a finished experiment again as a new one with everything its trial "
        "ran with pinned: module bytes, dataset version, hyperparameters and seed, environment "
        "revision (its packages, even if the environment changed since). 409 "
        "(`not_reproducible`) names what can no longer be pinned, unless allow_changes.",
    )
    def post(self, request: Request, experiment_id: int) -> Response:
        body = ReproduceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        experiment = experiment_get(user=request.user, experiment_id=experiment_id)
        reproduction = experiment_reproduce(
            user=request.user,  # type: ignore[arg-type]
            experiment=experiment, allow_changes=body.validated_data["allow_changes"])
        return Response(ReproductionSerializer(reproduction).data,
                        status=status.HTTP_201_CREATED)
