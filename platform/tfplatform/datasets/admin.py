from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from tfplatform.datasets.models import Dataset
from tfplatform.datasets.services import dataset_delete


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Read and delete here; registering goes through the API, whose checks (dataset roots,
    schema, counts) a plain admin form would skip. Deleting is the service's: the version is
    marked deleted (experiments keep their lineage), and another's is an audit row."""

    list_display = ("name", "version", "format", "owner", "team", "train_examples",
                    "size_bytes", "created_at", "deleted_at")
    list_filter = ("format",)
    search_fields = ("name", "owner__username", "train_uri")
    readonly_fields = [field.name for field in Dataset._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Dataset) -> None:
        dataset_delete(user=request.user, dataset=obj)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Dataset]) -> None:
        with transaction.atomic():
            for dataset in queryset:
                dataset_delete(user=request.user, dataset=dataset)  # type: ignore[arg-type]
