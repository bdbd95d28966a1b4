from django.contrib import admin
from django.http import HttpRequest

from tfplatform.audit.admin import AuditedModelAdmin
from tfplatform.audit.models import AuditAction
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
    ServingSample,
)


class ModelVersionInline(admin.TabularInline):
    model = ModelVersion
    extra = 0
    fields = ("version", "state", "path", "source_experiment")
    readonly_fields = fields


@admin.register(RegisteredModel)
class RegisteredModelAdmin(AuditedModelAdmin):
    list_display = ("name", "owner", "team", "public", "canary_percent")
    inlines = [ModelVersionInline]
    audit_fields = ("name", "owner", "team", "public", "canary_percent")
    audit_create = AuditAction.MODEL_CREATE
    audit_change = AuditAction.MODEL_CHANGE
    audit_delete = AuditAction.MODEL_DELETE


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    """Read-only: a version's files are published (and checked) by the registry's services;
    a path typed here would reach the model server unchecked."""

    list_display = ("model", "version", "state", "source_experiment", "created_at")
    list_filter = ("state",)
    readonly_fields = ("model", "version", "state", "path", "source_experiment", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ModelVersion | None = None
                              ) -> bool:
        return False


@admin.register(ModelLabel)
class ModelLabelAdmin(admin.ModelAdmin):
    """Read-only: labels move on the model's page and through the API, which check the version
    is loaded, tell the model server and write the audit log."""

    list_display = ("model", "label", "version", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ModelLabel | None = None
                              ) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ModelLabel | None = None
                              ) -> bool:
        return False


@admin.register(ServingSample)
class ServingSampleAdmin(admin.ModelAdmin):
    """Scrapes of the model server written by the scheduler: browsable, never edited."""

    list_display = ("recorded_at", "model", "requests_ok", "requests_failed")
    list_filter = ("model",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return False
