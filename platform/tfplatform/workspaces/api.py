"""REST API of workspaces: list, start (create), detail, stop, restart (optionally resized)."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.cluster.placement import gpu_fraction_of
from tfplatform.experiments.models import Environment
from tfplatform.experiments.selectors.scheduling import (
    experiment_queue_position,
    pending_reason_shown,
)
from tfplatform.workspaces import selectors as workspace_selectors
from tfplatform.workspaces import services as workspaces
from tfplatform.workspaces.models import Workspace


class WorkspaceSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    environment = serializers.CharField(source="environment.name", default=None, read_only=True,
                                        allow_null=True)
    state = serializers.SerializerMethodField()
    devices = serializers.SerializerMethodField()
    pending_reason = serializers.SerializerMethodField(
        help_text="Why its session waits: the scheduler's reason and its queue position.")
    error = serializers.CharField(
        source="experiment.error", default="", read_only=True,
        help_text="Why its session failed (state `failed`), e.g. its node restarted.")
    started_at = serializers.DateTimeField(source="experiment.started_at", default=None,
                                           read_only=True, allow_null=True)
    session = serializers.IntegerField(source="experiment_id", read_only=True, allow_null=True)
    lab_url = serializers.SerializerMethodField()
    gpu_fraction = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = ["id", "name", "owner", "environment", "gpus", "gpu_fraction", "gpu_memory_mb",
                  "cpu_slots", "pool", "gpu_type", "priority", "state",
                  "devices", "pending_reason", "stop_reason", "error", "session", "started_at",
                  "last_activity_at", "lab_url", "created_at"]
        read_only_fields = fields

    def get_pending_reason(self, workspace: Workspace) -> str:
        experiment = workspace.experiment
        if experiment is None:
            return ""
        return pending_reason_shown(experiment=experiment,
                                    position=experiment_queue_position(experiment=experiment))

    def get_state(self, workspace: Workspace) -> str:
        return workspace_selectors.workspace_state(workspace=workspace)

    def get_devices(self, workspace: Workspace) -> list[str]:
        return workspace_selectors.workspace_devices(workspace=workspace)

    def get_gpu_fraction(self, workspace: Workspace) -> float | None:
        return gpu_fraction_of(milli=workspace.gpu_milli)

    def get_lab_url(self, workspace: Workspace) -> str:
        return workspace_selectors.workspace_lab_url(workspace=workspace)


class WorkspaceCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    gpus = serializers.IntegerField(min_value=0, default=0)
    cpu_slots = serializers.IntegerField(
        min_value=1, max_value=workspaces.MAX_CPU_SLOTS, default=1,
        help_text="CPU slots on one node, for a workspace without GPUs (more than 1 with GPUs "
                  "is refused: GPUs replace the CPU slot).",
    )
    gpu_fraction = serializers.FloatField(
        required=False, allow_null=True, default=None,
        help_text="Instead of whole GPUs: this share of one GPU (above 0, below 1).")
    gpu_memory_mb = serializers.IntegerField(
        default=0, min_value=0, max_value=10_000_000,
        help_text="Instead of whole GPUs: this much of one GPU's memory.")
    pool = serializers.CharField(default="", allow_blank=True, max_length=63,
                                 help_text="Only nodes of this pool (empty: any).")
    gpu_type = serializers.CharField(default="", allow_blank=True, max_length=100,
                                     help_text="Only GPUs of this type (empty: any).")
    priority = serializers.IntegerField(min_value=-100, max_value=100, default=0)
    environment = serializers.SlugRelatedField(
        slug_field="name", queryset=Environment.objects.all(), required=False, allow_null=True
    )


class WorkspaceRestartSerializer(serializers.Serializer):
    gpus = serializers.IntegerField(min_value=0, required=False)
    cpu_slots = serializers.IntegerField(
        min_value=1, max_value=workspaces.MAX_CPU_SLOTS, required=False,
        help_text="Omitted: kept, or back to 1 when GPUs are asked for.",
    )


class WorkspaceListCreateApi(generics.ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self) -> QuerySet[Workspace]:
        return workspace_selectors.workspace_list(user=self.request.user)

    @extend_schema(request=WorkspaceCreateSerializer, responses={201: WorkspaceSerializer})
    def post(self, request: Request) -> Response:
        serializer = WorkspaceCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(serializer.validated_data)
        workspace = workspaces.workspace_create(
            owner=request.user,  # type: ignore[arg-type]
            request=workspaces.WorkspaceRequest(**data),
        )
        return Response(WorkspaceSerializer(workspace).data, status=status.HTTP_201_CREATED)


class WorkspaceDetailApi(APIView):
    @extend_schema(responses=WorkspaceSerializer)
    def get(self, request: Request, workspace_id: int) -> Response:
        workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
        return Response(WorkspaceSerializer(workspace).data)


class WorkspaceStopApi(APIView):
    @extend_schema(request=None, responses=WorkspaceSerializer)
    def post(self, request: Request, workspace_id: int) -> Response:
        workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
        stopped = workspaces.workspace_stop(workspace=workspace, actor=request.user)
        return Response(WorkspaceSerializer(stopped).data)


class WorkspaceStartApi(APIView):
    @extend_schema(request=None, responses=WorkspaceSerializer)
    def post(self, request: Request, workspace_id: int) -> Response:
        workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
        return Response(WorkspaceSerializer(workspaces.workspace_start(workspace=workspace)).data)


class WorkspaceRestartApi(APIView):
    """A new session on a new allocation (`gpus`, `cpu_slots` attach or detach devices); the home
    volume is kept, everything else of the running session is discarded."""

    @extend_schema(request=WorkspaceRestartSerializer, responses=WorkspaceSerializer)
    def post(self, request: Request, workspace_id: int) -> Response:
        workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
        serializer = WorkspaceRestartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        restarted = workspaces.workspace_restart(
            workspace=workspace, gpus=serializer.validated_data.get("gpus"),
            cpu_slots=serializer.validated_data.get("cpu_slots"))
        return Response(WorkspaceSerializer(restarted).data)
