"""Who may call what, beyond the default "signed in"."""

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request


class StaffWrites(permissions.BasePermission):
    """Everyone signed in reads; only staff create, change and delete."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if user is None or not user.is_authenticated:
            return False
        return request.method in permissions.SAFE_METHODS or bool(user.is_staff)
