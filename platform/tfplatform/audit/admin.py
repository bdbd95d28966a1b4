"""The log in the admin, read-only; and `AuditedModelAdmin`, which the other apps' admin
classes extend so their admin edits write the same rows as their services."""

from typing import Any

from django.contrib import admin
from django.db import models, transaction
from django.http import HttpRequest

from tfplatform.audit.models import AuditEntry
from tfplatform.audit.services import audit_changes, audit_record, audit_snapshot
from tfplatform.core.admin import ReadOnlyModelAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "actor_username", "action", "object_type", "object_repr",
                    "client_address")
    list_filter = ("action", "object_type")
    search_fields = ("actor_username", "object_repr", "object_id")
    date_hierarchy = "created_at"


class AuditedModelAdmin(admin.ModelAdmin):
    """Each save that changes `audit_fields`, each addition and each deletion writes one row,
    in the same transaction, with the signed-in staff member as the actor.

    `audit_create`, `audit_change` and `audit_delete` are the AuditAction codes; override
    `audit_action_of` where the code depends on what changed.
    """

    audit_fields: tuple[str, ...] = ()
    audit_create = ""
    audit_change = ""
    audit_delete = ""

    def audit_action_of(self, *, before: dict[str, Any], after: dict[str, Any]) -> str:
        return self.audit_change

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with transaction.atomic():
            stored = type(obj)._default_manager.filter(pk=obj.pk).first() if change else None
            before = audit_snapshot(obj=stored, fields=self.audit_fields) if stored else None
            super().save_model(request, obj, form, change)
            after = audit_snapshot(obj=obj, fields=self.audit_fields)
            if before is None:
                audit_record(actor=request.user, action=self.audit_create, target=obj,
                             before=None, after=after)
                return
            old, new = audit_changes(before=before, after=after)
            if new:
                audit_record(actor=request.user, action=self.audit_action_of(before=old, after=new),
                             target=obj, before=old, after=new)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            self._deletion_record(request=request, obj=obj)
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: models.QuerySet[Any]) -> None:
        with transaction.atomic():
            for obj in queryset:
                self._deletion_record(request=request, obj=obj)
            super().delete_queryset(request, queryset)

    def _deletion_record(self, *, request: HttpRequest, obj: models.Model) -> None:
        audit_record(actor=request.user, action=self.audit_delete, target=obj,
                     before=audit_snapshot(obj=obj, fields=self.audit_fields), after=None)
