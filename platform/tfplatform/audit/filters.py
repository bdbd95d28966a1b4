"""The log's filters, one set for the API and the staff page. (A NUL in a query string never
gets here: core/middleware.py refuses it.)"""

from django_filters import rest_framework as filters

from tfplatform.audit.models import AuditAction, AuditEntry


class AuditEntryFilter(filters.FilterSet):
    actor = filters.CharFilter(
        field_name="actor_username", max_length=150,
        help_text="Who acted, by username (kept after the account is deleted).")
    action = filters.MultipleChoiceFilter(
        choices=AuditAction.choices,
        help_text="One or more action codes (repeat the parameter), e.g. `node.cordon`.")
    object_type = filters.CharFilter(
        max_length=100, help_text="The object's kind, e.g. `cluster.node`, `accounts.team`.")
    object_id = filters.CharFilter(max_length=64, help_text="The object's id (with object_type).")
    since = filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="At or after this time (ISO 8601).")
    until = filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Before this time (ISO 8601).")

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "object_type", "object_id", "since", "until"]
