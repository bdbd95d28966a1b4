from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.selectors import allocations_visible_ids, node_disk_pressure, node_list
from tfplatform.cluster.services import node_set_state
from tfplatform.core.errors import NotFound


class DeviceSerializer(serializers.ModelSerializer):
    held_by = serializers.SerializerMethodField()

    class Meta:
        model = Device
        fields = [
            "id",
            "kind",
            "index",
            "name",
            "memory_bytes",
            "compute_capability",
            "emulated",
            "held_by",
        ]

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_held_by(self, device: Device) -> dict[str, Any] | None:
        holders: dict[int, Allocation] = self.context["holders"]
        allocation = holders.get(device.pk)
        if allocation is None:
            return None
        holder = allocation.holder
        assert holder is not None  # a holder deleted takes its allocations with it
        experiment = holder.experiment
        # Others' experiments are shown as "in use" without saying whose or what.
        if allocation.pk in self.context["visible_allocation_ids"]:
            return {
                "experiment": experiment.pk,
                "name": experiment.name,
                "task": f"{allocation.task_type}:{allocation.task_index}",
            }
        return {"experiment": None, "name": "in use", "task": allocation.task_type}


class NodeSerializer(serializers.ModelSerializer):
    devices = serializers.SerializerMethodField()
    disk_pressure = serializers.SerializerMethodField(
        help_text="Too little free space under the node's trial folders: it takes no new trials."
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "queue",
            "state",
            "pool",
            "labels",
            "gpu_type",
            "cpu_count",
            "memory_bytes",
            "last_heartbeat",
            "trial_runtime",
            "work_disk_free_bytes",
            "disk_pressure",
            "devices",
        ]

    def get_disk_pressure(self, node: Node) -> bool:
        return node_disk_pressure(node=node)

    @extend_schema_field(DeviceSerializer(many=True))
    def get_devices(self, node: Node) -> list[dict[str, Any]]:
        holders = {a.device_id: a for a in getattr(node, "active_allocations", [])}
        context = {**self.context, "holders": holders}
        return list(DeviceSerializer(node.devices.all(), many=True, context=context).data)


class NodeListApi(generics.ListAPIView):
    serializer_class = NodeSerializer
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Node]:
        return node_list()

    def get_serializer_context(self) -> dict[str, Any]:
        visible = allocations_visible_ids(user=self.request.user)
        return {**super().get_serializer_context(), "visible_allocation_ids": visible}


NODE_ACTIONS = {
    "cordon": Node.State.CORDONED,
    "drain": Node.State.DRAINING,
    "enable": Node.State.READY,
}


class NodeStateApi(APIView):
    """Staff: cordon (no new work), drain (cordon, then let running work finish), enable."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(request=None, responses=NodeSerializer)
    def post(self, request: Request, node_id: int, action: str) -> Response:
        node = node_list().filter(pk=node_id).first()
        if node is None or action not in NODE_ACTIONS:
            raise NotFound("Node not found.")
        node = node_set_state(node=node, state=NODE_ACTIONS[action], actor=request.user)
        context = {"request": request, "visible_allocation_ids": set()}
        return Response(NodeSerializer(node_list().get(pk=node.pk), context=context).data)
