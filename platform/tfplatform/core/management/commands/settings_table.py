"""`manage.py settings_table`: writes the configuration page's table from PlatformSettings."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tfplatform.config.platform_settings import settings_table_render

TABLE = Path("docs") / "operations" / "configuration-table.md"


class Command(BaseCommand):
    help = "Write docs/operations/configuration-table.md from the platform's settings object."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true",
                            help="Only compare: fail when the committed table is out of date.")

    def handle(self, *args: Any, **options: Any) -> None:
        path = settings.ROOT_DIR / TABLE
        table = settings_table_render()
        if options["check"]:
            if not path.exists() or path.read_text() != table:
                raise CommandError(f"{TABLE} is out of date: run `manage.py settings_table`")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(table)
        self.stdout.write(f"wrote {TABLE}")
