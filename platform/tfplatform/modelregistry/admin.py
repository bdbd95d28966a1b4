from django.contrib import admin

from tfplatform.modelregistry.models import ModelLabel, ModelVersion, RegisteredModel


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
    list_display = ("model", "version", "state", "source_experiment", "created_at")
    list_filter = ("state",)


@admin.register(ModelLabel)
class ModelLabelAdmin(admin.ModelAdmin):
    list_display = ("model", "label", "version", "updated_at")
