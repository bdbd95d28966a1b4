from django.contrib import admin

from tfplatform.workspaces.models import Workspace


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "team", "gpus", "priority", "experiment", "created_at")
    search_fields = ("name", "owner__username")
    # Sessions start and stop through services (the API, the pages), never through a form.
    readonly_fields = ("experiment", "api_token", "last_activity_at", "ready_at", "stop_reason")
