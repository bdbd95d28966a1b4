"""The platform's settings object: built from the environment, frozen, and documented by a
generated table that must match it (a setting added without its row fails here)."""

import dataclasses
from pathlib import Path

import environ
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.config.platform_settings import (
    PlatformSettings,
    platform_settings_from_env,
    settings_table_render,
)

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "docs" / "operations" / "configuration-table.md"


def test_the_committed_configuration_table_matches_the_settings() -> None:
    assert TABLE.read_text() == settings_table_render(), (
        "docs/operations/configuration-table.md is out of date: run `manage.py settings_table`")


def test_every_setting_has_a_variable_doc_and_group() -> None:
    for field in dataclasses.fields(PlatformSettings):
        assert field.metadata["doc"], field.name
        assert field.metadata["group"], field.name
        if field.metadata["env"] is None:
            assert field.default is not dataclasses.MISSING, field.name


def test_built_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in {"PLATFORM_TRIAL_RUNTIME": "process", "PLATFORM_LANDLOCK_ABI": "3",
                        "PLATFORM_DATASET_ROOTS": "/srv/a,/srv/b", "PLATFORM_BOARD_MAX": "2",
                        "PLATFORM_TENSORBOARD_CONFINE": "false",
                        "PLATFORM_MODEL_ALLOWED_OPS": "ReadFile,WriteFile",
                        "TF_SERVING_ACCESS_TOKEN": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PLATFORM_WORK_DIR", raising=False)
    monkeypatch.delenv("PLATFORM_TASK_PORT_SPAN", raising=False)
    built = platform_settings_from_env(env=environ.Env(), var_dir=tmp_path, secret_key="k" * 50)
    assert built.trial_runtime == "process"
    assert built.landlock_abi == 3
    assert built.dataset_roots == (Path("/srv/a"), Path("/srv/b"))
    assert built.board_confine is False
    assert built.model_allowed_ops == ("ReadFile", "WriteFile")
    assert built.work_dir == tmp_path / "work"
    assert built.tf_serving_access_token  # empty: derived from the secret key
    assert built.task_port_span == 5000


@pytest.mark.parametrize(("base", "span"), [("60000", "3000"), ("80", "100"), ("20000", "0")])
def test_task_ports_beyond_the_port_range_stop_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, base: str, span: str
) -> None:
    monkeypatch.setenv("PLATFORM_TASK_PORT_BASE", base)
    monkeypatch.setenv("PLATFORM_TASK_PORT_SPAN", span)
    with pytest.raises(ImproperlyConfigured, match="1024-65535"):
        platform_settings_from_env(env=environ.Env(), var_dir=tmp_path, secret_key="k" * 50)


def test_frozen_and_a_misspelt_field_is_refused() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.PLATFORM.work_dir = Path("/")  # type: ignore[misc]
    with pytest.raises(TypeError):
        dataclasses.replace(settings.PLATFORM, wrok_dir=Path("/"))


def test_the_override_fixture_changes_one_field_for_one_test(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    before = settings.PLATFORM
    platform_settings_override(work_dir=tmp_path)
    assert settings.PLATFORM.work_dir == tmp_path
    assert settings.PLATFORM.run_dir == before.run_dir


def test_a_tf_serving_release_without_a_kept_op_list_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    monkeypatch.setenv("TF_SERVING_VERSION", "2.3.0")
    with pytest.raises(ImproperlyConfigured, match=r"TF_SERVING_VERSION: No op list is kept for "
                       r"TensorFlow Serving 2\.3\.0"):
        platform_settings_from_env(env=environ.Env(), var_dir=tmp_path, secret_key="k")
    monkeypatch.setenv("TF_SERVING_VERSION", "2.20.0")
    built = platform_settings_from_env(env=environ.Env(), var_dir=tmp_path, secret_key="k")
    assert built.tf_serving_version == "2.20.0"
