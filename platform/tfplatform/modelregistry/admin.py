from django.contrib import admin
from django.http import HttpRequest

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
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "team", "public", "canary_percent")
    inlines = [ModelVersionInline]


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
    list_display = ("model", "label", "version", "updated_at")


@admin.register(ServingSample)
class ServingSampleAdmin(admin.ModelAdmin):
    """Scrapes of the model server written by the scheduler: browsable, never edited."""

    list_display = ("recorded_at", "model", "requests_ok", "requests_failed")
    list_filter = ("model",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object | None = None) -> bool:
        return False
