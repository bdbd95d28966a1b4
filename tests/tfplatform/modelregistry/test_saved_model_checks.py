"""An uploaded SavedModel is a program: one whose graph uses an op that inference graphs do not
(a file read, a dataset, a hidden graph) is refused by name before the model server could load
it, unless an operator allows that operation; the server it would run in holds no platform
secret; a model cannot take the name of the server's own files."""

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from serving.access import access_token_derive
from tests import live
from tests.crafted_models import (
    csv_read_model,
    dataset_from_graph_model,
    directory_zip,
    examples_layers_model,
    file_read_model,
    file_table_model,
    newer_op_model,
    saved_model_save,
)
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import saved_model_zip, version_loaded

pytestmark = pytest.mark.django_db(transaction=True)


def _thief_zip(tmp_path: Path) -> io.BytesIO:
    path = saved_model_save(file_table_model(), tmp_path / "thief")
    return directory_zip(path, name="thief.zip")


def test_a_model_that_reads_files_at_init_is_refused_and_never_published(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": "thief",
                                             "file": _thief_zip(tmp_path)}, format="multipart")
    assert answer.status_code == 400, answer.content
    assert "InitializeTableFromTextFileV2" in answer.json()["error"]
    published = model_server["base"] / "thief"
    assert not published.exists() or not any(published.iterdir())


@pytest.mark.parametrize(("attack", "op"), [
    (lambda: csv_read_model("/etc/passwd"), "CSVDatasetV2"),
    (lambda: csv_read_model("/proc/self/environ"), "CSVDatasetV2"),
    (dataset_from_graph_model, "DatasetFromGraph"),
], ids=["csv-passwd", "csv-environ", "dataset-from-graph"])
def test_a_model_that_reads_files_through_a_dataset_is_refused_by_name(
    model_server: dict[str, Any], tmp_path: Path, attack: Callable[[], object], op: str
) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    model = directory_zip(saved_model_save(attack(), tmp_path / "attack"), name="attack.zip")
    answer = client.post("/api/v1/models/", {"model_name": "reader", "file": model},
                         format="multipart")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid_input"
    assert f"uses {op}" in answer.json()["error"] or f", {op}" in answer.json()["error"]
    published = model_server["base"] / "reader"
    assert not published.exists() or not any(published.iterdir())


def test_a_keras_model_with_every_layer_of_the_examples_publishes_and_serves(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    model = saved_model_save(examples_layers_model(), tmp_path / "layers")
    answer = client.post("/api/v1/models/", {
        "model_name": "layers", "file": directory_zip(model, name="layers.zip")},
        format="multipart")
    assert answer.status_code == 202, answer.content
    assert version_loaded(client, "layers", 1)["state"] == "available"


@pytest.mark.parametrize("name", ["models.config", "monitoring.config", "Models.Config"])
def test_a_model_cannot_take_the_name_of_the_servers_own_files(
    name: str, settings: Any, tmp_path: Path, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(model_base_path=tmp_path)
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": name, "file": saved_model_zip(
        "saved_model_half_plus_two_cpu")}, format="multipart")
    assert answer.status_code == 400, answer.content
    assert "model server" in answer.json()["model_name"][0]
    assert not (tmp_path / name).exists()


def test_the_model_server_holds_no_platform_secret(tmp_path: Path) -> None:
    """Started as the Procfile starts it (`manage.py serve_models`, which execs the server),
    from an environment full of the platform's secrets: the server's own has none of them, not
    even its access token (a file it reads at start; test_model_server_access.py shows the
    server started so demands it)."""
    secrets = {"DJANGO_SECRET_KEY": "canary-secret-key-0123456789abcdef",
               "PLATFORM_ADMIN_PASSWORD": "canary-admin-password",
               "CELERY_BROKER_URL": "redis://canary-broker:6379/9"}
    token = access_token_derive(secret=secrets["DJANGO_SECRET_KEY"])
    models = tmp_path / "models"
    models.mkdir()
    env = live.child_env(MODEL_BASE_PATH=str(models), **secrets,
                         TF_SERVING_REST=f"http://127.0.0.1:{live.free_port()}",
                         TF_SERVING_GRPC=f"127.0.0.1:{live.free_port()}")
    env.pop("TF_SERVING_ACCESS_TOKEN", None)
    log = tmp_path / "model-server.log"
    process = live.start([sys.executable, "manage.py", "serve_models"], env=env, log=log)
    try:
        live.wait_for(lambda: Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[
            1:3] == [b"-m", b"serving"], timeout=60, what="the exec of the server", log=log)
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
    finally:
        live.stop(process)
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert "TF_SERVING_ACCESS_TOKEN_FILE" in names
    assert not names & {*secrets, "DATABASE_URL", "CACHE_URL", "PLATFORM_VAR_DIR"}, names
    for value in (*secrets.values(), live.database_url(), token):
        assert value.encode() not in environ
    assert f"HOME={Path.home()}".encode() not in environ


def test_an_operator_may_allow_an_operation(
    model_server: dict[str, Any], tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(model_allowed_ops=["InitializeTableFromTextFileV2"])
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": "allowed",
                                             "file": _thief_zip(tmp_path)}, format="multipart")
    assert answer.status_code == 202, answer.content


def test_a_model_that_the_model_servers_release_could_not_load_is_refused_saying_why(
    model_server: dict[str, Any], tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    # Compose's TF Serving 2.20 under the platform's TensorFlow 2.21: an op 2.21 added.
    platform_settings_override(model_allowed_ops=["DecodeJxl"], tf_serving_version="2.20.0")
    client = APIClient()
    client.force_authenticate(UserFactory())
    path = saved_model_save(newer_op_model(), tmp_path / "decoder")
    answer = client.post("/api/v1/models/", {"model_name": "decoder",
                                             "file": directory_zip(path, name="decoder.zip")},
                         format="multipart")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid_input"
    assert answer.json()["error"].startswith(
        "The SavedModel uses DecodeJxl, which TensorFlow Serving 2.20.0 (the model server's "
        "release) does not have")
    platform_settings_override(tf_serving_version="")  # the embedded server: 2.21 itself
    accepted = client.post("/api/v1/models/", {"model_name": "decoder",
                                               "file": directory_zip(path, name="decoder.zip")},
                           format="multipart")
    assert accepted.status_code == 202, accepted.content


def test_a_model_the_check_let_through_still_reads_nothing_outside_the_model_base_path(
    model_server: dict[str, Any], tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    """The second wall: the embedded server is confined (Landlock) to the model base path, so a
    file-reading op an operator allowed gets nothing of the platform's (here: a secret beside
    var/), while the same op reading inside the base path works."""
    platform_settings_override(model_allowed_ops=["ReadFile"])
    secret = tmp_path / "secret_key"
    secret.write_text("the-platform-secret")
    inside = model_server["base"].parent / f"{tmp_path.name}-words.txt"
    inside.write_text("a-public-word")
    client = APIClient()
    client.force_authenticate(UserFactory())

    def read_through(name: str, path: Path) -> Any:
        model = saved_model_save(file_read_model(str(path)), tmp_path / name)
        upload = client.post("/api/v1/models/", {
            "model_name": name, "file": directory_zip(model, name=f"{name}.zip")},
            format="multipart")
        assert upload.status_code == 202, upload.content
        version_loaded(client, name, 1)
        return client.post(f"/api/v1/models/{name}:predict", data='{"instances": [1.0]}',
                           content_type="application/json")

    control = read_through("words", inside)
    assert control.status_code == 200, control.content
    assert control.json()["predictions"] == ["a-public-word"]  # the op itself works

    stolen = read_through("stealer", secret)
    assert "the-platform-secret" not in stolen.content.decode()
    assert stolen.status_code == 403, stolen.content  # TF Serving's PERMISSION_DENIED
    assert "Permission denied" in stolen.json()["error"]
