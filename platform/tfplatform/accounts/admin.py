from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from tfplatform.accounts.models import ApiToken, Team, User


@admin.register(User)
class PlatformUserAdmin(UserAdmin):
    fieldsets = (*UserAdmin.fieldsets, ("Team", {"fields": ("team",)}))  # type: ignore[misc]
    list_display = ("username", "email", "team", "is_staff", "is_active")
    list_filter = ("team", "is_staff", "is_active")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "gpu_quota", "gpu_limit", "cpu_slot_quota", "cpu_slot_limit",
                    "over_quota_weight", "max_priority", "workspace_max_hours",
                    "user_max_queued", "user_max_running", "user_max_workspaces", "created_at")
    list_editable = ("gpu_quota", "gpu_limit", "cpu_slot_quota", "cpu_slot_limit",
                     "over_quota_weight", "max_priority", "workspace_max_hours",
                     "user_max_queued", "user_max_running", "user_max_workspaces")
    search_fields = ("name",)


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
