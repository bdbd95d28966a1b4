from django.contrib import admin

from tfplatform.datasets.models import Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Read and delete here; registering goes through the API, whose checks (dataset roots,
    schema, counts) a plain admin form would skip."""

    list_display = ("name", "version", "format", "owner", "team", "train_examples",
                    "size_bytes", "created_at", "deleted_at")
    list_filter = ("format",)
    search_fields = ("name", "owner__username", "train_uri")
    readonly_fields = [field.name for field in Dataset._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
