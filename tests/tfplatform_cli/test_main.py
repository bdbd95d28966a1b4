"""`tfp` against a live server: logging in, and every kind of bad input, without a traceback."""

import json
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import live
from tests.factories import (
    PASSWORD,
    DatasetFactory,
    EnvironmentFactory,
    UserFactory,
    node_with_gpus,
)
from tests.tfplatform_cli.conftest import Tfp
from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.tokens import api_token_digest
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db(transaction=True)


def login(user: Tfp, server: str, username: str, password: str = PASSWORD) -> Any:
    return user(
        "login", "--server", server, "--username", username, "--password-stdin", stdin=password
    )


def test_login_keeps_a_private_token_and_a_wrong_password_is_refused(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    alice = UserFactory(username="alice")
    user = tfp("alice")
    credentials = user.config / "credentials.json"

    wrong = login(user, live_server.url, "alice", password="not-her-password\n")
    assert wrong.returncode == 1
    assert wrong.stderr == "error: Unable to log in with provided credentials.\n"
    assert not credentials.exists()

    done = login(user, live_server.url, "alice", password=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert "Logged in to" in done.stdout
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    stored = json.loads(credentials.read_text())
    assert (stored["server"], stored["username"]) == (live_server.url, "alice")
    [token] = ApiToken.objects.filter(user=alice)
    assert token.digest == api_token_digest(key=stored["token"])  # the server keeps its hash
    assert token.name.startswith("tfp on ")
    # The stored server and token serve the next commands.
    assert json.loads(user("list", "--json").stdout) == []

    # TFP_TOKEN wins over the stored token.
    forged = user("list", TFP_TOKEN="0" * 40)
    assert forged.returncode == 1
    assert forged.stderr == "error: Invalid, expired or revoked token. Run `tfp login`.\n"

    listed = json.loads(user("tokens", "--json").stdout)
    assert [t["id"] for t in listed] == [token.pk] and "token" not in listed[0]

    # The stored token is never sent to another server.
    elsewhere = user("--server", "http://127.0.0.1:9", "list")
    assert elsewhere.returncode == 1
    assert f"logged in to {live_server.url}, not http://127.0.0.1:9" in elsewhere.stderr

    assert user("logout").stdout == f"Logged out of {live_server.url}.\n"
    assert not credentials.exists()
    assert not ApiToken.objects.filter(user=alice).exists()  # revoked on the server too
    assert user("list", TFP_TOKEN=stored["token"]).returncode == 1
    after = user("status", "1")
    assert after.returncode == 1
    assert after.stderr.startswith("error: not logged in")


def test_without_tfp_config_dir_the_token_goes_to_the_users_config_folder(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    UserFactory(username="carol")
    user = tfp("carol")
    done = user(
        "login",
        f"--server={live_server.url}/",
        "--username=carol",
        "--password-stdin",
        stdin=PASSWORD,
        TFP_CONFIG_DIR=None,
    )
    assert done.returncode == 0, done.stderr
    stored = user.home / ".config" / "tfp" / "credentials.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["server"] == live_server.url  # trailing / dropped


def test_unreachable_server_is_one_clear_line(tfp: Callable[[str], Tfp]) -> None:
    user = tfp("dave")
    server = f"http://127.0.0.1:{live.free_port()}"
    listed = user("list", TFP_SERVER=server, TFP_TOKEN="x" * 40)
    assert listed.returncode == 1
    assert listed.stderr == f"error: cannot reach {server}: connection refused\n"
    logged = login(user, server, "dave")
    assert logged.returncode == 1
    assert logged.stderr == f"error: cannot reach {server}: connection refused\n"
    assert not user.config.exists()


def test_bad_spec_files_are_refused_with_the_field_errors(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    UserFactory(username="erin")
    user = tfp("erin")
    assert login(user, live_server.url, "erin").returncode == 0

    def submit(name: str, text: str) -> Any:
        spec = tmp_path / name
        spec.write_text(text)
        result = user("submit", str(spec))
        assert result.returncode == 1
        assert result.stdout == ""
        return result.stderr

    broken = submit("broken.yaml", "name: x\nmodel: [mlp\ndataset: digits\n")
    assert broken.startswith(f"error: {tmp_path / 'broken.yaml'} is not valid YAML:")
    assert "(line 3, column 8)" in broken

    unknown = submit("unknown.yaml", "name: x\nmodel: no-such-model\ndataset: digits\n")
    assert unknown.startswith("error: model: Unknown model 'no-such-model'. Choose one of: ")

    typo = submit(
        "typo.json", json.dumps({"name": "x", "model": "mlp", "dataset": "digits", "epochs": 2})
    )
    assert typo == "error: Invalid input.\n  epochs: Unknown field.\n"

    workers = submit(
        "workers.yaml", "name: x\nmodel: mlp\ndataset: digits\nresources: {workers: 0}\n"
    )
    assert workers.startswith("error: resources: workers must be between 1 and")

    assert "is not valid JSON: " in submit("bad.json", '{"name": "x",')
    assert "the spec must be a mapping" in submit("list.yaml", "- name: x\n")
    missing = submit(
        "upload.yaml", "name: x\nmodel: upload\nmodel_file: gone.py\ndataset: digits\n"
    )
    assert (
        missing
        == f"error: {tmp_path / 'upload.yaml'}: model_file gone.py: No such file or directory\n"
    )
    assert Experiment.objects.count() == 0

    not_found = user("status", "999999")
    assert (not_found.returncode, not_found.stderr) == (1, "error: experiment 999999 not found\n")
    bad_state = user("list", "--state", "sleeping")
    assert bad_state.returncode == 1
    assert bad_state.stderr.startswith("error: Invalid input.\n  state: Not a state: 'sleeping'")


def test_a_spec_picks_its_environment_by_name(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    EnvironmentFactory(name="jokes", extra_packages=["pyjokes==0.8.3"])
    UserFactory(username="gina")
    user = tfp("gina")
    assert login(user, live_server.url, "gina").returncode == 0
    spec = tmp_path / "jokes.yaml"
    spec.write_text("name: x\nmodel: mlp\ndataset: digits\nenvironment: jokes\n")
    submitted = user("submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    environment = Experiment.objects.get(pk=int(submitted.stdout)).environment
    assert environment is not None and environment.name == "jokes"

    spec.write_text("name: x\nmodel: mlp\ndataset: digits\nenvironment: no-such-env\n")
    refused = user("submit", str(spec))
    assert refused.returncode == 1
    assert "  environment: Object with name=no-such-env does not exist." in refused.stderr


def test_an_elastic_spec_is_submitted_and_status_shows_its_range(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    node_with_gpus(gpus=4)
    UserFactory(username="hana")
    user = tfp("hana")
    assert login(user, live_server.url, "hana").returncode == 0
    spec = tmp_path / "elastic.yaml"
    spec.write_text("name: x\nmodel: mlp\ndataset: digits\nresources:\n  gpus_per_worker: 4\n"
                    "  min_gpus_per_worker: 1\n")
    submitted = user("submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    experiment = Experiment.objects.get(pk=int(submitted.stdout))
    assert (experiment.gpus_per_worker, experiment.gpus_per_worker_min) == (4, 1)
    status = user("status", submitted.stdout.strip())
    assert "size        elastic from 1 to 4" in status.stdout, status.stdout

    spec.write_text("name: x\nmodel: mlp\ndataset: digits\nresources:\n  gpus_per_worker: 4\n"
                    "  min_gpus_per_worker: 3\n")
    refused = user("submit", str(spec))
    assert refused.returncode == 1
    assert "No size from 3 to 3 divides 4" in refused.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["status", "five"],
        ["predict", "digits", "in.json", "--version", "1", "--label", "stable"],
        ["login", "--password-stdin"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(args: list[str], tfp: Callable[[str], Tfp]) -> None:
    result = tfp("frank")(*args)
    assert result.returncode == 2
    assert "error: " in result.stderr


def test_the_client_needs_neither_django_nor_the_platform(tmp_path: Path) -> None:
    code = (
        "import sys, tfplatform_cli.main; "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'django', 'rest_framework', 'tfplatform'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out == "[]\n"


def test_datasets_lists_only_what_the_user_can_use(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    DatasetFactory(owner=alice, name="alices-shards", size_bytes=3 * 2**20)
    user, other = tfp("alice"), tfp("bob")
    assert login(user, live_server.url, alice.username).returncode == 0
    assert login(other, live_server.url, bob.username).returncode == 0
    shown = user("datasets")
    assert shown.returncode == 0
    assert "alices-shards" in shown.stdout and "3.0 MiB" in shown.stdout
    assert json.loads(user("datasets", "--json").stdout)[0]["format"] == "parquet"
    assert other("datasets").stdout == "No registered datasets.\n"
