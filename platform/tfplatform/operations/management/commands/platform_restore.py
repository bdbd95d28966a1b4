from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tfplatform.core.errors import PlatformError
from tfplatform.operations.services.restore import backup_restore


class Command(BaseCommand):
    help = ("Restore a platform_backup folder into a fresh installation (a database with no "
            "accounts, empty storage folders) of the release that made it.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", type=Path, help="the backup's folder")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            manifest = backup_restore(source=options["source"])
        except PlatformError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"Restored the backup of {manifest.created_at} "
                          f"({', '.join(manifest.files)}).")
