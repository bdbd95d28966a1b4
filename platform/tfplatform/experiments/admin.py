from typing import Any

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.environments import (
    environment_create,
    environment_delete,
    environment_packages_clean,
    environment_update,
)
from tfplatform.experiments.models import (
    Checkpoint,
    Environment,
    EnvironmentBuild,
    EnvironmentRevision,
    Experiment,
    ExperimentTag,
    Metric,
    Trial,
    TrialLineage,
)

ENVIRONMENT_FIELDS = ("name", "image", "tensorflow_version", "gpu_capable", "extra_packages")


class EnvironmentAdminForm(forms.ModelForm):
    class Meta:
        model = Environment
        fields = ENVIRONMENT_FIELDS

    def clean_extra_packages(self) -> list[str]:
        try:
            return environment_packages_clean(packages=self.cleaned_data["extra_packages"])
        except InvalidInput as error:
            raise forms.ValidationError(error.message) from error


class EnvironmentBuildInline(admin.TabularInline):
    model = EnvironmentBuild
    extra = 0
    can_delete = False
    fields = ("node", "key", "state", "started_at", "finished_at")
    readonly_fields = fields


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    form = EnvironmentAdminForm
    list_display = ("name", "image", "tensorflow_version", "gpu_capable", "extra_packages")
    inlines = [EnvironmentBuildInline]

    def save_model(self, request: HttpRequest, obj: Environment, form: Any, change: bool) -> None:
        # Through the services, like the API and the staff page: one set of rules, one audit.
        fields = {name: form.cleaned_data[name] for name in ENVIRONMENT_FIELDS}
        if change:
            saved = environment_update(environment=Environment.objects.get(pk=obj.pk), **fields,
                                       actor=request.user)
        else:
            saved = environment_create(**fields, actor=request.user)
        obj.pk, obj.created_at = saved.pk, saved.created_at

    def delete_model(self, request: HttpRequest, obj: Environment) -> None:
        environment_delete(environment=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Environment]) -> None:
        with transaction.atomic():
            for environment in queryset:
                environment_delete(environment=environment, actor=request.user)


@admin.register(EnvironmentBuild)
class EnvironmentBuildAdmin(admin.ModelAdmin):
    list_display = ("environment", "node", "state", "key", "started_at", "finished_at")
    list_filter = ("state",)
    readonly_fields = ("environment", "node", "key", "state", "log", "started_at", "finished_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # only a node building the venv knows what to record


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    fields = ("restart_count", "state", "exit_reason", "started_at", "finished_at")
    readonly_fields = fields


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "owner",
        "team",
        "state",
        "model",
        "dataset",
        "priority",
        "created_at",
    )
    list_filter = ("state", "kind", "team")
    search_fields = ("name", "owner__username")
    # State moves go through services, never through a form field.
    readonly_fields = (
        "state",
        "strategy",
        "strategy_reason",
        "pending_reason",
        "error",
        "results",
        "started_at",
        "finished_at",
        # Its lineage: what it pinned at submission.
        "environment_revision",
        "dataset_version",
        "dataset_version_number",
        "dataset_fingerprint",
        "reproduced_from",
    )
    inlines = [TrialInline]


@admin.register(Trial)
class TrialAdmin(admin.ModelAdmin):
    list_display = ("id", "experiment", "restart_count", "state", "started_at", "finished_at")
    list_filter = ("state",)
    readonly_fields = ("state",)


@admin.register(Metric)
class MetricAdmin(admin.ModelAdmin):
    list_display = ("trial", "name", "epoch", "step", "value", "recorded_at")
    list_filter = ("name",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("experiment", "trial", "epoch", "is_best", "path", "created_at")


class _RecordAdmin(admin.ModelAdmin):
    """What lineage records is read, never written, here: a changed record would lie."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(EnvironmentRevision)
class EnvironmentRevisionAdmin(_RecordAdmin):
    list_display = ("environment", "number", "content_hash", "image", "tensorflow_version",
                    "created_at")


@admin.register(TrialLineage)
class TrialLineageAdmin(_RecordAdmin):
    list_display = ("trial", "environment_name", "environment_revision", "environment_hash",
                    "module", "dataset", "dataset_version", "recorded_at")
    search_fields = ("environment_hash", "module_sha256", "dataset_fingerprint")


@admin.register(ExperimentTag)
class ExperimentTagAdmin(admin.ModelAdmin):
    list_display = ("name", "experiment")
    search_fields = ("name", "experiment__name")
    raw_id_fields = ("experiment",)
