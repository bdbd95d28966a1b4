"""GET /api/v1/audit/: the audit log, staff only (403 for anyone else, as the other staff
endpoints answer). Read-only: nothing in the API writes it."""

from django.db.models import QuerySet
from rest_framework import generics, permissions, serializers

from tfplatform.audit.filters import AuditEntryFilter
from tfplatform.audit.models import AuditEntry
from tfplatform.audit.selectors import audit_entries


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor_username",
        help_text="The acting user's username; empty for the platform itself.")
    before = serializers.JSONField(allow_null=True, help_text="The fields before the change.")
    after = serializers.JSONField(allow_null=True, help_text="The fields after the change.")

    class Meta:
        model = AuditEntry
        fields = ["id", "created_at", "actor", "action", "object_type", "object_id",
                  "object_repr", "before", "after", "client_address"]
        read_only_fields = fields


class AuditEntryListApi(generics.ListAPIView):
    """The audit log, newest first: who did what to which object, before → after."""

    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilter
    permission_classes = [permissions.IsAdminUser]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        return audit_entries(user=self.request.user)
