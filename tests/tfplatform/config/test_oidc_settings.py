"""Single sign-on's settings: half a configuration stops the start, saying what is missing."""

from pathlib import Path

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured

from tfplatform.config.platform_settings import PlatformSettings, platform_settings_from_env

COMPLETE = {"PLATFORM_OIDC_ISSUER": "https://idp.example.org/realms/ml",
            "PLATFORM_OIDC_CLIENT_ID": "tf-platform",
            "PLATFORM_OIDC_CLIENT_SECRET": "s3cret"}


def build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **variables: str) -> PlatformSettings:
    for name, value in {**COMPLETE, **variables}.items():
        monkeypatch.setenv(name, value)
    return platform_settings_from_env(env=environ.Env(), var_dir=tmp_path, secret_key="k" * 50)


def test_a_complete_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built = build(monkeypatch, tmp_path, PLATFORM_OIDC_SCOPES="openid,email,groups",
                  PLATFORM_OIDC_GROUP_TEAMS="ml-vision=Vision,ml-nlp=NLP",
                  PLATFORM_OIDC_ALLOWED_GROUPS="ml-users")
    assert built.oidc_scopes == ("openid", "email", "groups")
    assert built.oidc_group_teams == ("ml-vision=Vision", "ml-nlp=NLP")
    assert built.oidc_allowed_groups == ("ml-users",)


def test_the_secret_may_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tfplatform.core.environment import platform_env

    secret = tmp_path / "oidc_client_secret"
    secret.write_text("from-a-file\n")
    for name, value in COMPLETE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PLATFORM_OIDC_CLIENT_SECRET")
    monkeypatch.setenv("PLATFORM_OIDC_CLIENT_SECRET_FILE", str(secret))
    built = platform_settings_from_env(env=platform_env(), var_dir=tmp_path, secret_key="k" * 50)
    assert built.oidc_client_secret == "from-a-file"


@pytest.mark.parametrize(("variables", "message"), [
    ({"PLATFORM_OIDC_CLIENT_SECRET": ""}, "PLATFORM_OIDC_CLIENT_SECRET are needed"),
    ({"PLATFORM_OIDC_CLIENT_ID": ""}, "PLATFORM_OIDC_CLIENT_ID and"),
    ({"PLATFORM_OIDC_ISSUER": "http://idp.example.org"}, "https://"),
    ({"PLATFORM_OIDC_ISSUER": "idp.example.org"}, "https://"),
    ({"PLATFORM_OIDC_GROUP_TEAMS": "vision"}, "is not `group=team`"),
    ({"PLATFORM_OIDC_GROUP_TEAMS": f"g={'t' * 101}"}, "is not `group=team`"),
    ({"PLATFORM_OIDC_ALLOWED_GROUPS": "ml", "PLATFORM_OIDC_GROUPS_CLAIM": ""},
     "needs a groups claim"),
])
def test_half_a_configuration_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        build(monkeypatch, tmp_path, **variables)


def test_http_only_on_this_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built = build(monkeypatch, tmp_path, PLATFORM_OIDC_ISSUER="http://127.0.0.1:5556/dex")
    assert built.oidc_issuer == "http://127.0.0.1:5556/dex"
