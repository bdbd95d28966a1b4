"""Backup and restore: a backup restored into a fresh installation (its own PostgreSQL, its own
folders, its own model server and web app) serves the same versions to the same people; a
backup that is cut short, changed, of another release or aimed at a used installation is
refused before anything is written."""

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.management import CommandError, call_command

from bench.stack import web_args
from tests import live
from tests.factories import PASSWORD, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, api, register
from tfplatform.operations.releases import RELEASES

pytestmark = pytest.mark.django_db(transaction=True)


def _restored_env(*, tmp_path: Path, database_url: str) -> dict[str, str]:
    folder = tmp_path / "restored"
    return live.platform_env(
        database_url=database_url, var_dir=folder / "var", MODEL_BASE_PATH=str(folder / "models"),
        PLATFORM_MEDIA_ROOT=str(folder / "uploads"), DATASETS_DIR=str(folder / "datasets"),
        TF_SERVING_GRPC=f"127.0.0.1:{live.free_port()}",
        TF_SERVING_REST=f"http://127.0.0.1:{live.free_port()}")


def _models_published(tmp_path: Path) -> None:
    alice = UserFactory(username="alice", team=TeamFactory())
    client = api(alice)
    assert register(client, "steady")["state"] == "available"  # half plus two
    assert register(client, "steady", HALF_PLUS_THREE)["state"] == "available"
    assert client.post("/api/v1/models/steady/labels/", {"label": "canary", "version": 2},
                       format="json").status_code == 200
    assert client.patch("/api/v1/models/steady/", {"canary_percent": 25},
                        format="json").status_code == 200
    assert register(api(UserFactory(username="bob")), "bobs")["state"] == "available"


@pytest.mark.slow
def test_a_backup_restored_into_a_fresh_installation_serves_the_same_versions(
    model_server: dict[str, Any], postgres: live.Postgres, tmp_path: Path
) -> None:
    _models_published(tmp_path)
    call_command("platform_backup", str(tmp_path / "backup"))
    assert (tmp_path / "backup").stat().st_mode & 0o777 == 0o700

    env = _restored_env(tmp_path=tmp_path, database_url=postgres.url)
    live.manage("platform_restore", str(tmp_path / "backup"), env=env)
    # The loader's tidying would delete every file no row names: none, in the new folders.
    left = live.manage("shell", "-c", "from tfplatform.modelregistry.services.publish import "
                       "model_files_leftovers_remove as r; print(len(r(older_than=0)))", env=env)
    assert left.splitlines()[-1] == "0"

    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    server = live.start([sys.executable, "manage.py", "serve_models"], env=env,
                        log=tmp_path / "model-server.log")
    web = live.start(web_args(port=port), env=env, log=tmp_path / "web.log")
    try:
        live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=90,
                      what="the restored web app", log=tmp_path / "web.log")
        # Her password and her models came back; Bob's stay his.
        token = requests.post(f"{base}/api/v1/auth/token/", timeout=10, json={
            "username": "alice", "password": PASSWORD}).json()["token"]
        alice = requests.Session()
        alice.headers["Authorization"] = f"Token {token}"

        def predict(route: str) -> Any:
            return alice.post(f"{base}/api/v1/models/steady/{route}:predict", timeout=30,
                              json={"instances": [2.0]})

        live.wait_for(lambda: predict("versions/1").status_code == 200, timeout=120,
                      what="the restored model server", log=tmp_path / "model-server.log")
        assert predict("versions/1").json() == {"predictions": [3.0]}
        assert predict("versions/2").json() == {"predictions": [4.0]}
        assert predict("labels/canary").json() == {"predictions": [4.0]}
        model = alice.get(f"{base}/api/v1/models/steady/", timeout=10).json()
        assert [v["state"] for v in model["versions"]] == ["available", "available"]
        assert model["labels"] == {"stable": 1, "canary": 2} and model["canary_percent"] == 25
        assert alice.get(f"{base}/api/v1/models/bobs/", timeout=10).status_code == 404
    finally:
        live.stop_all([web, server])


@pytest.fixture
def stored(tmp_path: Path, settings: Any,
           platform_settings_override: PlatformSettingsOverride) -> dict[str, Path]:
    """This installation's stored folders, of this test's own."""
    folders = {name: tmp_path / name for name in ("models", "uploads", "datasets")}
    for folder in folders.values():
        folder.mkdir()
    platform_settings_override(model_base_path=folders["models"],
                               datasets_dir=folders["datasets"])
    settings.MEDIA_ROOT = folders["uploads"]
    return folders


def _backup(stored: dict[str, Path], tmp_path: Path) -> Path:
    (stored["models"] / "m" / "1").mkdir(parents=True)
    (stored["models"] / "m" / "1" / "saved_model.pb").write_bytes(b"graph")
    call_command("platform_backup", str(tmp_path / "backup"))
    return tmp_path / "backup"


def _restore_refused(backup: Path, *, match: str) -> None:
    with pytest.raises(CommandError, match=match):
        call_command("platform_restore", str(backup))


def _manifest_edit(backup: Path, **changes: Any) -> None:
    path = backup / "manifest.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_a_backup_never_overwrites(stored: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "a").write_text("kept")
    with pytest.raises(CommandError, match="not an empty folder"):
        call_command("platform_backup", str(tmp_path / "used"))
    assert (tmp_path / "used" / "a").read_text() == "kept"


def test_an_installation_with_accounts_is_not_restored_into(
    stored: dict[str, Path], tmp_path: Path
) -> None:
    backup = _backup(stored, tmp_path)
    UserFactory()
    _restore_refused(backup, match="already has accounts")


def test_a_changed_or_cut_short_backup_is_refused(stored: dict[str, Path], tmp_path: Path) -> None:
    backup = _backup(stored, tmp_path)
    # A manifest that leaves out an archive the restore would read is no whole backup.
    files = json.loads((backup / "manifest.json").read_text())["files"]
    _manifest_edit(backup, files={k: v for k, v in files.items() if k != "models.tar.gz"})
    _restore_refused(backup, match=r"The backup lacks models\.tar\.gz")
    _manifest_edit(backup, files=files)
    data = backup / "database.json.gz"
    rows = json.loads(gzip.decompress(data.read_bytes()))
    data.write_bytes(gzip.compress(json.dumps(rows + rows[:1]).encode()))
    _restore_refused(backup, match=r"database\.json\.gz is not the file the backup was")
    data.unlink()
    _restore_refused(backup, match=r"The backup lacks database\.json\.gz")


def test_a_backup_of_another_release_is_refused_saying_what_to_do(
    stored: dict[str, Path], tmp_path: Path
) -> None:
    backup = _backup(stored, tmp_path)
    migrations = json.loads((backup / "manifest.json").read_text())["migrations"]
    _manifest_edit(backup, migrations=migrations | {
        "experiments": [*migrations["experiments"], "9999_from_the_future"]})
    _restore_refused(backup, match=r"newer release .*experiments\.9999_from_the_future")
    _manifest_edit(backup, migrations=migrations | {
        "experiments": migrations["experiments"][:-1]})
    _restore_refused(backup, match=r"older release .* then upgrade")
    # A schema a release had is named.
    schema = RELEASES["0.1.0"]
    _manifest_edit(backup, migrations={
        app: [name for name in names if app not in schema or name <= schema[app]]
        for app, names in migrations.items() if app != "workspaces"})
    _restore_refused(backup, match=r"made by release 0\.1\.0 .* then upgrade")


def test_an_archive_that_reaches_outside_its_folder_is_refused(
    stored: dict[str, Path], tmp_path: Path
) -> None:
    from tfplatform.operations.archive import file_digest

    backup = _backup(stored, tmp_path)
    for folder in stored.values():  # as a fresh installation's
        for entry in folder.iterdir():
            entry.rename(tmp_path / f"away-{folder.name}-{entry.name}")
    archive = backup / "models.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo("../escaped")
        member.size = 4
        tar.addfile(member, io.BytesIO(b"evil"))
    files = json.loads((backup / "manifest.json").read_text())["files"]
    _manifest_edit(backup, files=files | {"models.tar.gz": file_digest(path=archive)})
    _restore_refused(backup, match=r"models\.tar\.gz holds")
    assert not (tmp_path / "escaped").exists()
