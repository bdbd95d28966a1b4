from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tfplatform.core.errors import PlatformError
from tfplatform.operations.services.backup import backup_create


class Command(BaseCommand):
    help = ("Back the installation up into a new folder: every row of the database as one "
            "snapshot, the model store, uploads and datasets (and trials' working folders with "
            "--work). Restore it with platform_restore.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("output", type=Path, help="a folder that does not exist yet, or is "
                            "empty")
        parser.add_argument("--work", action="store_true",
                            help="also the trials' working folders (checkpoints; can be large)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            manifest = backup_create(output=options["output"], work=options["work"])
        except PlatformError as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"Backed up into {options['output']}: {', '.join(manifest.files)}")
