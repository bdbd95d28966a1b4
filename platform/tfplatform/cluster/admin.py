from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tfplatform.audit.admin import AuditedModelAdmin
from tfplatform.audit.models import AuditAction
from tfplatform.cluster.models import (
    Allocation,
    AllocationUtilization,
    Device,
    Node,
    SparkCluster,
    UtilizationSample,
)
from tfplatform.cluster.services import node_set_state
from tfplatform.core.admin import ReadOnlyModelAdmin


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0
    readonly_fields = ("kind", "index", "name", "memory_bytes", "compute_capability", "emulated")


@admin.register(Node)
class NodeAdmin(AuditedModelAdmin):
    list_display = ("hostname", "state", "queue", "cpu_count", "last_heartbeat")
    list_filter = ("state",)
    # The state moves through the actions below (the service, its checks and its audit row).
    readonly_fields = ("state", "queue", "last_heartbeat", "registered_at")
    inlines = [DeviceInline]
    actions = ["cordon", "drain", "enable"]
    audit_fields = ("hostname", "address", "pool", "labels", "gpu_type", "trial_runtime",
                    "cpu_count", "memory_bytes")
    audit_create = AuditAction.NODE_CREATE
    audit_change = AuditAction.NODE_CHANGE
    audit_delete = AuditAction.NODE_DELETE

    def _set(self, request: HttpRequest, queryset: QuerySet[Node], state: str) -> None:
        for node in queryset:
            node_set_state(node=node, state=state, actor=request.user)
        messages.success(request, f"{queryset.count()} node(s) set to {state}.")

    @admin.action(description="Cordon: accept no new work")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set(request, queryset, Node.State.CORDONED)

    @admin.action(description="Drain: cordon and let running work finish")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set(request, queryset, Node.State.DRAINING)

    @admin.action(description="Enable: accept new work")
    def enable(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._set(request, queryset, Node.State.READY)


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = (
        "node",
        "kind",
        "index",
        "name",
        "memory_bytes",
        "compute_capability",
        "emulated",
    )
    list_filter = ("kind", "node")


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = (
        "holder",
        "node",
        "device",
        "task_type",
        "task_index",
        "created_at",
        "released_at",
    )
    list_filter = ("node",)


@admin.register(UtilizationSample)
class UtilizationSampleAdmin(ReadOnlyModelAdmin):
    """History written by the scheduler: browsable, never edited by hand."""

    list_display = (
        "recorded_at",
        "gpus_used",
        "gpus_total",
        "cpu_slots_used",
        "cpu_slots_total",
        "queued",
        "running",
    )
    date_hierarchy = "recorded_at"


@admin.register(AllocationUtilization)
class AllocationUtilizationAdmin(admin.ModelAdmin):
    """NVML readings folded in from heartbeats: browsable, never edited by hand."""

    list_display = ("allocation", "samples", "last_percent", "first_at", "last_at", "busy_at")
    list_select_related = ("allocation__device__node",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return False


@admin.register(SparkCluster)
class SparkClusterAdmin(ReadOnlyModelAdmin):
    """Read here; registering, changing and removing go through /api/v1/spark-clusters/, whose
    checks (master, configuration) and audit rows a plain admin form would skip."""

    list_display = ("name", "master", "task_slots", "gpus", "updated_at")
