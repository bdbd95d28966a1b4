from django.contrib import admin

from tfplatform.experiments.models import Checkpoint, Environment, Experiment, Metric, Trial


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ("name", "image", "tensorflow_version", "gpu_capable")


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
    list_filter = ("state", "team")
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
