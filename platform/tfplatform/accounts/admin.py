from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from tfplatform.accounts.models import Team, User


@admin.register(User)
class PlatformUserAdmin(UserAdmin):
    fieldsets = (*UserAdmin.fieldsets, ("Team", {"fields": ("team",)}))  # type: ignore[misc]
    list_display = ("username", "email", "team", "is_staff", "is_active")
    list_filter = ("team", "is_staff", "is_active")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "gpu_quota", "max_priority", "created_at")
    list_editable = ("gpu_quota", "max_priority")
    search_fields = ("name",)
