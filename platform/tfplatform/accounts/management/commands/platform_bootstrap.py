import os
import secrets
from typing import Any

from django.core.management.base import BaseCommand

from tfplatform.accounts.services import admin_ensure


class Command(BaseCommand):
    help = "Create the first admin account if none exists (password from PLATFORM_ADMIN_PASSWORD)."

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("PLATFORM_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        username = os.environ.get("PLATFORM_ADMIN_USER", "admin")
        created = admin_ensure(username=username, password=password)
        if not created:
            self.stdout.write("An admin account already exists.")
        elif os.environ.get("PLATFORM_ADMIN_PASSWORD"):
            self.stdout.write(
                f"Created admin account '{username}' (password from PLATFORM_ADMIN_PASSWORD)."
            )
        else:
            # Printed once: the password is not stored anywhere else in clear text.
            self.stdout.write(
                self.style.WARNING(f"Created admin account '{username}' with password: {password}")
            )
