"""Each staff action, and each change to tokens, quotas, environments, labels and node states,
leaves exactly one audit row with its actor and before → after, whichever way it was made
(API, page, admin), and none when it fails."""

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.conftest import peer_data_or_skip
from tests.factories import (
    PASSWORD,
    DatasetFactory,
    DeviceFactory,
    EnvironmentFactory,
    ExperimentFactory,
    ModelLabelFactory,
    ModelVersionFactory,
    NodeFactory,
    RegisteredModelFactory,
    SubscriptionFactory,
    TeamFactory,
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tests.live import free_port
from tfplatform.accounts.models import ApiToken, User
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.audit.models import AuditEntry
from tfplatform.cluster.models import Allocation, Node
from tfplatform.cluster.services import node_heartbeat, nodes_finish_draining, nodes_mark_lost
from tfplatform.core.errors import Conflict, Unavailable
from tfplatform.datasets.models import Dataset
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_start
from tfplatform.modelregistry.services.labels import (
    model_label_remove,
    model_label_set,
    model_settings_update,
)
from tfplatform.notifications.models import Delivery, Subscription

pytestmark = pytest.mark.django_db


def rows_after(mark: int) -> list[tuple[str, str, Any, Any]]:
    """(actor, action, before, after) of each row written since `mark`, oldest first."""
    return [(e.actor_username, e.action, e.before, e.after)
            for e in AuditEntry.objects.filter(pk__gt=mark).order_by("pk")]


def mark() -> int:
    return AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def admin_browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root() -> User:
    return UserFactory(username="root", is_staff=True, is_superuser=True)


def test_cordon_drain_and_enable_each_leave_one_row_from_the_api_page_and_admin(
        root: User) -> None:
    node = NodeFactory(hostname="gpu-box")
    start = mark()
    assert api(root).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 200
    admin_browser(root).post(f"/cluster/nodes/{node.pk}/state/", {"action": "drain"})
    done = admin_browser(root).post("/admin/cluster/node/", {
        "action": "enable", "_selected_action": [node.pk]})
    assert done.status_code == 302
    assert rows_after(start) == [
        ("root", "node.cordon", {"state": "ready"}, {"state": "cordoned"}),
        ("root", "node.drain", {"state": "cordoned"}, {"state": "draining"}),
        ("root", "node.enable", {"state": "draining"}, {"state": "ready"}),
    ]
    entry = AuditEntry.objects.filter(pk__gt=start).first()
    assert entry is not None and (entry.object_type, entry.object_repr) == (
        "cluster.node", "gpu-box")
    # Refused for non-staff: nothing happened, nothing is recorded.
    assert api(UserFactory()).post(f"/api/v1/nodes/{node.pk}/drain/").status_code == 403
    assert len(rows_after(start)) == 3


def test_the_platforms_own_node_state_changes_are_rows_without_an_actor() -> None:
    silent = NodeFactory(hostname="silent", last_heartbeat=timezone.now() - timedelta(hours=1))
    draining = NodeFactory(hostname="idle-draining", state=Node.State.DRAINING)
    start = mark()
    nodes_mark_lost()
    nodes_mark_lost()  # already lost: no second row
    node_heartbeat(hostname="silent")
    nodes_finish_draining()
    assert rows_after(start) == [
        ("", "node.state_change", {"state": "ready"}, {"state": "lost"}),
        ("", "node.state_change", {"state": "lost"}, {"state": "ready"}),
        ("", "node.state_change", {"state": "draining"}, {"state": "cordoned"}),
    ]
    assert [e.object_id for e in AuditEntry.objects.filter(pk__gt=start).order_by("pk")] == [
        str(silent.pk), str(silent.pk), str(draining.pk)]


def test_environment_create_change_and_delete_are_rows_and_a_refused_change_is_none(
        root: User) -> None:
    client = api(root)
    start = mark()
    created = client.post("/api/v1/environments/", {
        "name": "tf-nightly", "image": "tensorflow/tensorflow:nightly",
        "tensorflow_version": "2.22.0"}, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/environments/{created.json()['id']}/"
    assert client.patch(url, {"image": "tensorflow/tensorflow:2.22.0"},
                        format="json").status_code == 200
    assert client.patch(url, {"image": "tensorflow/tensorflow:2.22.0"},
                        format="json").status_code == 200  # no change: no row
    EnvironmentFactory(name="taken")
    assert client.patch(url, {"name": "taken", "gpu_capable": True},
                        format="json").status_code == 400  # rolled back whole
    assert client.delete(url).status_code == 204
    snapshot = {"name": "tf-nightly", "image": "tensorflow/tensorflow:2.22.0",
                "tensorflow_version": "2.22.0", "gpu_capable": False, "extra_packages": []}
    assert rows_after(start) == [
        ("root", "environment.create", None,
         {**snapshot, "image": "tensorflow/tensorflow:nightly"}),
        ("root", "environment.change", {"image": "tensorflow/tensorflow:nightly"},
         {"image": "tensorflow/tensorflow:2.22.0"}),
        ("root", "environment.delete", snapshot, None),
    ]


def test_an_admin_edit_of_an_environment_writes_the_services_row(root: User) -> None:
    environment = EnvironmentFactory(name="legacy", image="tensorflow/tensorflow:2.20.0",
                                     tensorflow_version="2.20.0")
    start = mark()
    saved = admin_browser(root).post(
        f"/admin/experiments/environment/{environment.pk}/change/",
        {"name": "legacy", "image": "tensorflow/tensorflow:2.21.0", "tensorflow_version":
         "2.20.0", "extra_packages": "[]", "builds-TOTAL_FORMS": "0",
         "builds-INITIAL_FORMS": "0"})
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    assert rows_after(start) == [("root", "environment.change",
                                  {"image": "tensorflow/tensorflow:2.20.0"},
                                  {"image": "tensorflow/tensorflow:2.21.0"})]


def test_token_issue_revoke_and_revocation_by_password_change_or_staff(root: User) -> None:
    alice = UserFactory(username="alice")
    start = mark()
    signed_in = APIClient().post("/api/v1/auth/token/", {
        "username": "alice", "password": PASSWORD, "name": "laptop"}, format="json")
    assert signed_in.status_code == 200
    token = ApiToken.objects.get(user=alice)
    assert api(alice).delete(f"/api/v1/auth/tokens/{token.pk}/").status_code == 204
    [(actor, action, before, after), (actor2, action2, before2, after2)] = rows_after(start)
    assert (actor, action, before) == ("alice", "token.issue", None)
    assert after["name"] == "laptop" and after["prefix"] == token.prefix
    assert after["user"] == "alice" and "digest" not in after
    assert (actor2, action2, after2) == ("alice", "token.revoke", None)
    assert before2 == after

    # A password changed (here by staff in the admin) revokes every token: a row each, the
    # actor being whoever changed it.
    for name in ("a", "b"):
        api_token_issue(user=alice, name=name, actor=alice)
    start = mark()
    changed = admin_browser(root).post(f"/admin/accounts/user/{alice.pk}/password/", {
        "password1": "a-new-long-passphrase-42", "password2": "a-new-long-passphrase-42",
        "usable_password": "true"})
    assert changed.status_code == 302, changed.content.decode()[-2000:]
    assert sorted((a, act, b["name"]) for a, act, b, _ in rows_after(start)) == [
        ("root", "token.revoke", "a"), ("root", "token.revoke", "b")]

    # Staff deleting one in the admin revokes it through the same service.
    token, _ = api_token_issue(user=alice, name="ci", actor=alice)
    start = mark()
    deleted = admin_browser(root).post(f"/admin/accounts/apitoken/{token.pk}/delete/",
                                       {"post": "yes"})
    assert deleted.status_code == 302
    assert [(a, act, b["name"]) for a, act, b, _ in rows_after(start)] == [
        ("root", "token.revoke", "ci")]


def test_a_quota_change_in_the_admin_is_one_row_and_a_rename_is_a_team_change(
        root: User) -> None:
    team = TeamFactory(name="vision", gpu_quota=4)
    form = {"name": "vision", "gpu_quota": "8", "cpu_slot_quota": "64", "over_quota_weight": "1",
            "max_priority": "10", "workspace_max_hours": "24", "gpu_limit": "12"}
    start = mark()
    browser = admin_browser(root)
    url = f"/admin/accounts/team/{team.pk}/change/"
    assert browser.post(url, form).status_code == 302
    assert browser.post(url, form).status_code == 302  # saved unchanged: no row
    assert browser.post(url, {**form, "name": "vision-2"}).status_code == 302
    assert rows_after(start) == [
        ("root", "quota.change", {"gpu_quota": 4, "gpu_limit": None},
         {"gpu_quota": 8, "gpu_limit": 12}),
        ("root", "team.change", {"name": "vision"}, {"name": "vision-2"}),
    ]


def test_deactivating_a_user_in_the_admin_is_a_row_and_revokes_their_tokens(
        root: User) -> None:
    bob = UserFactory(username="bob", email="bob@example.com")
    api_token_issue(user=bob, name="ci")
    joined = timezone.localtime(bob.date_joined)
    start = mark()
    saved = admin_browser(root).post(f"/admin/accounts/user/{bob.pk}/change/", {
        "username": "bob", "email": "bob@example.com", "first_name": "", "last_name": "",
        "is_staff": "", "date_joined_0": joined.strftime("%Y-%m-%d"),
        "date_joined_1": joined.strftime("%H:%M:%S"), "team": ""})
    assert saved.status_code == 302, saved.content.decode()[-3000:]
    rows = rows_after(start)
    assert rows[0] == ("root", "user.deactivate", {"is_active": True}, {"is_active": False})
    assert [row[:2] for row in rows[1:]] == [("root", "token.revoke")]
    assert not ApiToken.objects.filter(user=bob).exists()


@pytest.fixture
def model_server_away(platform_settings_override: PlatformSettingsOverride) -> None:
    """Labels are saved, then sent to the model server: here none listens, so each move is
    kept and answered 503 (Unavailable), as when the server is away."""
    port = free_port()
    platform_settings_override(tf_serving_grpc=f"127.0.0.1:{port}",
                               tf_serving_rest=f"http://127.0.0.1:{port}")


def test_label_promotion_rollback_and_removal_are_rows_on_the_model(
        root: User, model_server_away: None) -> None:
    stable = ModelLabelFactory(version=ModelVersionFactory(version=1))
    model = stable.model
    second = ModelVersionFactory(model=model, version=2)
    first = stable.version
    start = mark()
    for label, version in (("stable", second), ("stable", first), ("canary", second)):
        with pytest.raises(Unavailable):
            model_label_set(model=model, label=label, version=version, actor=root)
    with pytest.raises(Unavailable):
        model_label_remove(model=model, label="canary", actor=root)
    model_settings_update(model=model, canary_percent=20, actor=root)
    assert rows_after(start) == [
        ("root", "label.promote", {"label": "stable", "version": 1},
         {"label": "stable", "version": 2}),
        ("root", "label.rollback", {"label": "stable", "version": 2},
         {"label": "stable", "version": 1}),
        ("root", "label.promote", {"label": "canary", "version": None},
         {"label": "canary", "version": 2}),
        ("root", "label.remove", {"label": "canary", "version": 2}, None),
        ("root", "model.change", {"canary_percent": 0}, {"canary_percent": 20}),
    ]
    assert set(AuditEntry.objects.filter(pk__gt=start).values_list("object_repr", flat=True)
               ) == {model.name}


def test_a_refused_label_move_is_no_row_and_the_admin_cannot_move_one(root: User) -> None:
    version = ModelVersionFactory(model=RegisteredModelFactory(), state="loading")
    with pytest.raises(Conflict, match="not available"):
        model_label_set(model=version.model, label="stable", version=version, actor=root)
    label = ModelLabelFactory()
    browser = admin_browser(root)
    assert browser.post(f"/admin/modelregistry/modellabel/{label.pk}/delete/",
                        {"post": "yes"}).status_code == 403
    assert browser.get("/admin/modelregistry/modellabel/add/").status_code == 403
    assert AuditEntry.objects.count() == 0


def test_staff_canceling_someone_elses_experiment_is_a_row_its_owner_canceling_is_not(
        root: User) -> None:
    mine, theirs = ExperimentFactory(), ExperimentFactory(owner=UserFactory(username="carol"))
    assert api(mine.owner).post(f"/api/v1/experiments/{mine.pk}/cancel/").status_code == 202
    assert AuditEntry.objects.count() == 0
    assert api(root).post(f"/api/v1/experiments/{theirs.pk}/cancel/").status_code == 202
    assert rows_after(0) == [("root", "experiment.cancel", {"state": "queued"},
                              {"state": "canceled"})]


def test_a_staff_members_experiment_preempting_others_is_a_row_per_victim(root: User) -> None:
    node = NodeFactory(hostname="solo")
    for index in range(2):
        DeviceFactory(node=node, kind="gpu", index=index)
    victim = ExperimentFactory(gpus_per_worker=2, owner=UserFactory(username="dave"))
    assert scheduler_pass() == 1
    trial = victim.trials.get()
    trial_start(trial_id=trial.pk)
    experiment_transition(experiment=victim, to=Experiment.State.RUNNING)
    urgent = ExperimentFactory(gpus_per_worker=2, priority=90, owner=root)
    assert scheduler_pass() == 0
    assert Allocation.objects.filter(released_at__isnull=True).count() == 2  # still the victim's
    [(actor, action, before, after)] = rows_after(0)
    assert (actor, action, before) == ("root", "experiment.preempt",
                                       {"state": "running", "trial": trial.pk})
    assert after == {"stop_requested": "preempted", "by_experiment": urgent.pk, "priority": 90,
                     "detail": f"for experiment {urgent.pk} (priority 90)"}
    entry = AuditEntry.objects.get()
    assert (entry.object_type, entry.object_id) == ("experiments.experiment", str(victim.pk))


def test_staff_removing_someone_elses_subscription_is_a_row_its_owner_removing_is_not(
        root: User) -> None:
    mine = SubscriptionFactory(owner=UserFactory(username="erin"))
    assert api(mine.owner).delete(f"/api/v1/notifications/subscriptions/{mine.pk}/"
                                  ).status_code == 204
    assert AuditEntry.objects.count() == 0
    theirs = SubscriptionFactory(owner=UserFactory(username="frank"), scope="mine")
    assert api(root).delete(f"/api/v1/notifications/subscriptions/{theirs.pk}/"
                            ).status_code == 204
    assert rows_after(0) == [("root", "subscription.delete", {
        "owner": "frank", "events": ["experiment.failed"], "scope": "mine", "webhook_url": "",
        "email": True}, None)]
    assert AuditEntry.objects.get().object_id == str(theirs.pk)
    # The admin's delete goes through the same service: a row, and no pending delivery left.
    other = SubscriptionFactory(owner=UserFactory(username="gina"))
    start = mark()
    deleted = admin_browser(root).post(
        f"/admin/notifications/subscription/{other.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert [row[:2] for row in rows_after(start)] == [("root", "subscription.delete")]
    assert not Subscription.objects.exists() and not Delivery.objects.exists()


def test_deleting_someone_elses_dataset_version_is_a_row_its_owner_deleting_is_not(
        root: User) -> None:
    mine = DatasetFactory(owner=UserFactory(username="hana"), name="pets", version=1)
    assert api(mine.owner).delete(f"/api/v1/datasets/{mine.pk}/").status_code == 204
    assert AuditEntry.objects.count() == 0
    theirs = DatasetFactory(owner=UserFactory(username="ivan", team=TeamFactory(name="nlp")),
                            name="corpus", version=2, fingerprint="f" * 16)
    client = api(root)
    assert client.delete(f"/api/v1/datasets/{theirs.pk}/").status_code == 204
    assert client.delete(f"/api/v1/datasets/{theirs.pk}/").status_code == 404  # gone: no row
    assert rows_after(0) == [("root", "dataset.delete", {
        "name": "corpus", "version": 2, "owner": "ivan", "team": "nlp",
        "train_uri": "/srv/data/train", "validation_uri": "/srv/data/validation",
        "fingerprint": "f" * 16}, None)]
    # The admin's delete marks the version deleted (its row stays for the experiments that
    # read it) and records it the same way.
    other = DatasetFactory(owner=UserFactory(username="jon"))
    start = mark()
    deleted = admin_browser(root).post(f"/admin/datasets/dataset/{other.pk}/delete/",
                                       {"post": "yes"})
    assert deleted.status_code == 302
    assert [row[:2] for row in rows_after(start)] == [("root", "dataset.delete")]
    assert Dataset.objects.get(pk=other.pk).deleted_at is not None
    # One deleted already is neither deleted again nor recorded.
    assert admin_browser(root).post(f"/admin/datasets/dataset/{theirs.pk}/delete/",
                                    {"post": "yes"}).status_code == 302
    assert len(rows_after(start)) == 1


@pytest.fixture
def dataset_root(tmp_path: Path, platform_settings_override: PlatformSettingsOverride) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    platform_settings_override(dataset_roots=[folder])
    return folder


def _shards(folder: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    pq.write_table(pa.table({"x": [0.0, 1.0, 2.0], "label": [0, 1, 0]}),
                   folder / "part-0.parquet")
    return str(folder)


def test_staff_registering_a_dataset_for_another_owner_is_a_row_for_themselves_is_not(
        root: User, dataset_root: Path) -> None:
    kate = UserFactory(username="kate")
    home = dataset_root / "users" / "kate"
    fields = {"format": "parquet", "train": _shards(home / "train"),
              "validation": _shards(home / "validation"), "label": "label"}
    assert api(kate).post("/api/v1/datasets/", {**fields, "name": "hers"},
                          format="json").status_code == 201
    own = _shards(dataset_root / "corpora" / "shared")
    assert api(root).post("/api/v1/datasets/", {**fields, "name": "own", "train": own,
                                                "validation": own},
                          format="json").status_code == 201
    assert AuditEntry.objects.count() == 0
    created = api(root).post("/api/v1/datasets/", {**fields, "name": "hers", "owner": "kate"},
                             format="json")
    assert created.status_code == 201, created.content
    [(actor, action, before, after)] = rows_after(0)
    assert (actor, action, before) == ("root", "dataset.register", None)
    assert {key: after[key] for key in ("name", "version", "owner", "team", "train_uri")} == {
        "name": "hers", "version": 2, "owner": "kate", "team": None,
        "train_uri": fields["train"]}
    assert AuditEntry.objects.get().object_id == str(created.json()["id"])


@pytest.fixture
def import_dir(tmp_path: Path, platform_settings_override: PlatformSettingsOverride) -> Path:
    folder = tmp_path / "import"
    folder.mkdir()
    platform_settings_override(model_import_dir=folder, model_base_path=tmp_path / "models")
    return folder


def _saved_model_in(folder: Path) -> str:
    import shutil

    source = (peer_data_or_skip() / "tf-serving-testdata" / "saved_model_half_plus_two_cpu"
              / "00000123")
    target = folder / "half"
    shutil.copytree(source, target)
    for path in (target, *target.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(target)


def test_staff_registering_a_model_from_a_path_into_anothers_model_is_a_row(
        root: User, import_dir: Path) -> None:
    path = _saved_model_in(import_dir)
    client = api(root)
    assert client.post("/api/v1/models/", {"model_name": "own", "path": path},
                       format="json").status_code == 202  # a model of their own: no row
    assert AuditEntry.objects.count() == 0
    theirs = RegisteredModelFactory(name="halves", owner=UserFactory(username="lena"))
    answer = client.post("/api/v1/models/", {"model_name": "halves", "path": path},
                         format="json")
    assert answer.status_code == 202, answer.content
    assert rows_after(0) == [("root", "model.register", None,
                              {"version": answer.json()["version"], "path": path,
                               "owner": "lena"})]
    entry = AuditEntry.objects.get()
    assert (entry.object_type, entry.object_id) == ("modelregistry.registeredmodel",
                                                    str(theirs.pk))


def _inline(prefix: str) -> dict[str, str]:
    """An admin inline's management form, with no rows."""
    return {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}


NODE_FORM = {"hostname": "gpu-7", "address": "127.0.0.1", "cpu_count": "2",
             "memory_bytes": "0", "os_info": "", "trial_runtime": "sandbox",
             "work_disk_free_bytes": "", "pool": "default", "labels": "{}", "gpu_type": "",
             **_inline("devices")}
TEAM_FORM = {"name": "speech", "gpu_quota": "4", "cpu_slot_quota": "64", "gpu_limit": "",
             "cpu_slot_limit": "", "over_quota_weight": "1", "user_max_queued": "",
             "user_max_running": "", "user_max_workspaces": "", "max_priority": "10",
             "workspace_max_hours": "24"}


def _user_form(user: User, **changes: str) -> dict[str, str]:
    joined = timezone.localtime(user.date_joined)
    return {"username": user.username, "email": user.email, "first_name": "",
            "last_name": "", "is_active": "on" if user.is_active else "", "team": "",
            "date_joined_0": joined.strftime("%Y-%m-%d"),
            "date_joined_1": joined.strftime("%H:%M:%S"), **changes}


def _delete(path: str) -> tuple[str, dict[str, Any]]:
    return f"/admin/{path}/delete/", {"post": "yes"}


# Each admin form the audit log records: what it posts (objects made first), and the name the
# row gives its object.
ADMIN_CASES: dict[str, Callable[[], tuple[str, dict[str, Any], str]]] = {
    "node.create": lambda: ("/admin/cluster/node/add/", NODE_FORM, "gpu-7"),
    "node.change": lambda: (
        f"/admin/cluster/node/{NodeFactory(hostname='gpu-7').pk}/change/",
        {**NODE_FORM, "pool": "a100"}, "gpu-7"),
    "node.delete": lambda: (
        *_delete(f"cluster/node/{NodeFactory(hostname='gpu-7').pk}"), "gpu-7"),
    "model.create": lambda: (
        "/admin/modelregistry/registeredmodel/add/",
        {"name": "resnet", "owner": UserFactory().pk, "team": "", "canary_percent": "0",
         **_inline("versions")}, "resnet"),
    "model.delete": lambda: (
        *_delete(f"modelregistry/registeredmodel/{RegisteredModelFactory(name='resnet').pk}"),
        "resnet"),
    "team.create": lambda: ("/admin/accounts/team/add/", TEAM_FORM, "speech"),
    "team.delete": lambda: (
        *_delete(f"accounts/team/{TeamFactory(name='speech').pk}"), "speech"),
    "user.create": lambda: (
        "/admin/accounts/user/add/",
        {"username": "mia", "usable_password": "true", "password1": "a-long-passphrase-42",
         "password2": "a-long-passphrase-42"}, "mia"),
    "user.change": lambda: (
        f"/admin/accounts/user/{(mia := UserFactory(username='mia')).pk}/change/",
        _user_form(mia, email="mia@example.com"), "mia"),
    "user.activate": lambda: (
        f"/admin/accounts/user/{(mia := UserFactory(username='mia', is_active=False)).pk}"
        "/change/", _user_form(mia, is_active="on"), "mia"),
    "user.delete": lambda: (
        *_delete(f"accounts/user/{UserFactory(username='mia').pk}"), "mia"),
}


@pytest.mark.parametrize("action", ADMIN_CASES)
def test_each_admin_form_the_log_records_writes_one_row_with_the_staff_member(
        action: str, root: User) -> None:
    url, form, name = ADMIN_CASES[action]()
    start = mark()
    saved = admin_browser(root).post(url, form)
    assert saved.status_code == 302, saved.content.decode()[-3000:]
    entries = list(AuditEntry.objects.filter(pk__gt=start))
    assert [(e.actor_id, e.actor_username, e.action, e.object_repr) for e in entries] == [
        (root.pk, "root", action, name)]
