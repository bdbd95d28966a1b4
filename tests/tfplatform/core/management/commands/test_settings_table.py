"""`manage.py settings_table`: writes the settings reference; --check fails while it is stale."""

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tfplatform.config.platform_settings import settings_table_render


def test_check_passes_on_the_committed_table() -> None:
    call_command("settings_table", "--check")


def test_check_fails_on_a_stale_table_and_writing_mends_it(settings: object,
                                                            tmp_path: Path) -> None:
    settings.ROOT_DIR = tmp_path  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="out of date"):
        call_command("settings_table", "--check")
    call_command("settings_table")
    written = tmp_path / "docs" / "operations" / "configuration-table.md"
    assert written.read_text() == settings_table_render()
    call_command("settings_table", "--check")
