import secrets
from typing import Any

from django.core.management.base import BaseCommand

from tfplatform.accounts.services import admin_ensure
from tfplatform.core.environment import platform_env


class Command(BaseCommand):
    help = ("Create the first admin account if none exists (password from PLATFORM_ADMIN_PASSWORD "
            "or the file PLATFORM_ADMIN_PASSWORD_FILE names).")

    def handle(self, *args: Any, **options: Any) -> None:
        env = platform_env()
        configured = env.str("PLATFORM_ADMIN_PASSWORD", default="")
        password = configured or secrets.token_urlsafe(12)
        username = env.str("PLATFORM_ADMIN_USER", default="admin")
        created = admin_ensure(username=username, password=password)
        if not created:
            self.stdout.write("An admin account already exists.")
        elif configured:
            self.stdout.write(
                f"Created admin account '{username}' (password from PLATFORM_ADMIN_PASSWORD)."
            )
        else:
            # Printed once: the password is not stored anywhere else in clear text.
            self.stdout.write(
                self.style.WARNING(f"Created admin account '{username}' with password: {password}")
            )
