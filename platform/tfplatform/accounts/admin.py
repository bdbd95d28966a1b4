from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from tfplatform.accounts.models import ApiToken, OidcIdentity, Team, User
from tfplatform.accounts.tokens import api_token_revoke, api_tokens_revoke_all
from tfplatform.audit.admin import AuditedModelAdmin
from tfplatform.audit.models import AuditAction

# What the scheduler and admission read of a team: a change to any is a quota change.
TEAM_QUOTA_FIELDS = ("gpu_quota", "gpu_limit", "cpu_slot_quota", "cpu_slot_limit",
                     "over_quota_weight", "max_priority", "workspace_max_hours",
                     "user_max_queued", "user_max_running", "user_max_workspaces")


@admin.register(User)
class PlatformUserAdmin(AuditedModelAdmin, UserAdmin):
    fieldsets = (*UserAdmin.fieldsets, ("Team", {"fields": ("team",)}))  # type: ignore[misc]
    list_display = ("username", "email", "team", "is_staff", "is_active")
    list_filter = ("team", "is_staff", "is_active")
    audit_fields = ("username", "email", "first_name", "last_name", "team", "is_active",
                    "is_staff", "is_superuser")
    audit_create = AuditAction.USER_CREATE
    audit_change = AuditAction.USER_CHANGE
    audit_delete = AuditAction.USER_DELETE

    def audit_action_of(self, *, before: dict[str, Any], after: dict[str, Any]) -> str:
        if "is_active" in after:
            return AuditAction.USER_ACTIVATE if after["is_active"] else AuditAction.USER_DEACTIVATE
        return AuditAction.USER_CHANGE

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # A deactivated user's tokens are revoked, not merely refused: automation stops, and
        # reactivating the user brings none back.
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if not obj.is_active:
                api_tokens_revoke_all(user=obj, actor=request.user)


@admin.register(Team)
class TeamAdmin(AuditedModelAdmin):
    list_display = ("name", "gpu_quota", "gpu_limit", "cpu_slot_quota", "cpu_slot_limit",
                    "over_quota_weight", "max_priority", "workspace_max_hours",
                    "user_max_queued", "user_max_running", "user_max_workspaces", "created_at")
    list_editable = ("gpu_quota", "gpu_limit", "cpu_slot_quota", "cpu_slot_limit",
                     "over_quota_weight", "max_priority", "workspace_max_hours",
                     "user_max_queued", "user_max_running", "user_max_workspaces")
    search_fields = ("name",)
    audit_fields = ("name", *TEAM_QUOTA_FIELDS)
    audit_create = AuditAction.TEAM_CREATE
    audit_change = AuditAction.TEAM_CHANGE
    audit_delete = AuditAction.TEAM_DELETE

    def audit_action_of(self, *, before: dict[str, Any], after: dict[str, Any]) -> str:
        if any(name in after for name in TEAM_QUOTA_FIELDS):
            return AuditAction.QUOTA_CHANGE
        return AuditAction.TEAM_CHANGE


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Staff see and revoke tokens; keys exist only in their owners' hands."""

    list_display = ("name", "user", "prefix", "created_at", "expires_at", "last_used_at")
    search_fields = ("user__username", "name", "prefix")
    readonly_fields = ("user", "name", "prefix", "digest", "created_at", "expires_at",
                       "last_used_at")

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    # Deleting is revoking: through the service, its cache and its audit row.
    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        api_token_revoke(user=obj.user, token_id=obj.pk, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        with transaction.atomic():
            for token in queryset.select_related("user"):
                api_token_revoke(user=token.user, token_id=token.pk, actor=request.user)


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    """Who signs in as whom through the OpenID provider. Staff link an account they made to its
    provider identity (issuer and `sub`) where single sign-on creates none
    (PLATFORM_OIDC_CREATE_USERS=false)."""

    list_display = ("user", "subject", "issuer", "last_sign_in_at", "revoked_at")
    search_fields = ("user__username", "subject")
    raw_id_fields = ("user",)
    readonly_fields = ("created_at", "last_sign_in_at", "revoked_at")
