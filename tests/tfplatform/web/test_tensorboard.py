"""TensorBoard of experiments through the platform (experiments/boards/): a real `tensorboard`
process per set of experiments, reached only through the signed-in proxy. The owner, a teammate
and staff see the scalars; another user gets 404 whatever key or path they try, the board's port
answers nobody without its token, and a link planted in a run folder shows nothing. Its Profile
tab shows the trials' profiler traces, of its own runs only, and captures nothing."""

import gzip
import json
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.test import Client

from tests.factories import PASSWORD, ExperimentFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.web.conftest import ARTIFACTS
from tfplatform.experiments.boards import registry as boards
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def scalars_write(*, folder: Path, tag: str, values: list[float]) -> None:
    """Event files as a trial's TensorBoard callback leaves them, written without TensorFlow."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar.summary import scalar_pb
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for step, value in enumerate(values):
        writer.add_event(event_pb2.Event(step=step, wall_time=time.time(),
                                         summary=scalar_pb(tag, value)))
    writer.close()


@pytest.fixture
def boards_here(settings: Any, tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    """Work dirs and board records of this test's own; its boards stopped after it."""
    platform_settings_override(work_dir=tmp_path / "work", board_dir=tmp_path / "boards")
    yield tmp_path / "work"
    boards.boards_reap(idle_seconds=0)


def finished(**fields: Any) -> Experiment:
    experiment = ExperimentFactory(state=Experiment.State.COMPLETED, **fields)
    scalars_write(folder=experiment_work_dir(experiment_id=experiment.pk) / "tensorboard" / "train",
                  tag="epoch_loss", values=[2.0, 1.0, 0.5])
    return experiment


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_owner_teammates_and_staff_see_the_scalars_and_no_one_else(
    boards_here: Path,
) -> None:
    team = TeamFactory()
    owner = UserFactory(team=team)
    experiment = finished(owner=owner, name="digits: mlp")
    theirs = finished(owner=UserFactory())  # a stranger's, for the combined keys below
    owner_client = client_for(owner)

    opened = owner_client.get(f"/experiments/tensorboard/?ids={experiment.pk}")
    assert opened.status_code == 302 and opened["Location"] == f"/tensorboard/{experiment.pk}/"
    page = owner_client.get(opened["Location"])
    assert page.status_code == 200 and b"<tb-webapp>" in b"".join(page.streaming_content)
    assert page["Content-Security-Policy"].endswith(";frame-ancestors 'self'")
    assert page["X-Frame-Options"] == "SAMEORIGIN"
    run = f"{experiment.pk}-digits-mlp/train"
    runs = owner_client.get(f"/tensorboard/{experiment.pk}/data/runs")
    assert b"".join(runs.streaming_content).decode() == f'["{run}"]'
    for user in (UserFactory(team=team), UserFactory(is_staff=True)):
        answer = client_for(user).get(f"/tensorboard/{experiment.pk}/data/plugin/scalars/scalars",
                                      {"run": run, "tag": "epoch_loss"})
        assert answer.status_code == 200
        points = json.loads(b"".join(answer.streaming_content))
        assert [(step, value) for _, step, value in points] == [(0, 2.0), (1, 1.0), (2, 0.5)]

    # The pages' queries are posts with TensorBoard's header; a post without it is refused.
    query = f"/tensorboard/{experiment.pk}/experiment/defaultExperimentId/data/plugin/timeseries/"
    asked = {"requests": json.dumps([{"plugin": "scalars", "tag": "epoch_loss"}])}
    assert owner_client.post(f"{query}timeSeries", asked).status_code == 403
    answer = owner_client.post(f"{query}timeSeries", asked, HTTP_X_XSRF_PROTECTED="1")
    [series] = json.loads(b"".join(answer.streaming_content))
    assert [p["value"] for p in series["runToSeries"][run]] == [2.0, 1.0, 0.5]

    stranger = client_for(theirs.owner)
    both = "-".join(str(pk) for pk in sorted((experiment.pk, theirs.pk)))
    for path in (f"/experiments/tensorboard/?ids={experiment.pk}",
                 f"/experiments/tensorboard/?ids={theirs.pk},{experiment.pk}",
                 f"/tensorboard/{experiment.pk}/", f"/tensorboard/{experiment.pk}",
                 f"/tensorboard/{experiment.pk}/data/runs",
                 f"/tensorboard/{experiment.pk}/data/plugin/scalars/scalars?run={run}&tag=x",
                 f"/tensorboard/{both}/data/runs", f"/tensorboard/0{experiment.pk}/data/runs",
                 f"/tensorboard/{experiment.pk}-{experiment.pk}/data/runs"):
        assert stranger.get(path).status_code == 404, path
        assert stranger.post(path, HTTP_X_XSRF_PROTECTED="1").status_code in (404, 405), path
    assert owner_client.get(f"/tensorboard/{both}/data/runs").status_code == 404
    assert Client().get(f"/tensorboard/{experiment.pk}/data/runs").status_code == 302  # sign in
    assert stranger.get(f"/experiments/tensorboard/?ids={theirs.pk}").status_code == 302

    # The board itself answers only the proxy: without its token its port is closed to callers.
    board = boards.board_open(user=owner, experiment_ids=[experiment.pk])
    direct = requests.get(f"http://127.0.0.1:{board.port}{board.path}data/runs", timeout=5)
    assert direct.status_code == 403
    # Its record holds that token: the web app's to read, whatever the umask.
    record = boards_here.parent / "boards" / f"{experiment.pk}.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_several_experiments_share_a_board_and_planted_links_lead_nowhere(
    boards_here: Path,
) -> None:
    owner = UserFactory()
    first, second = finished(owner=owner, name="a"), finished(owner=owner, name="b")
    other = finished(owner=UserFactory(), name="secret")
    # A hostile trial's links: to another user's run folder, and an event file elsewhere.
    planted = experiment_work_dir(experiment_id=second.pk) / "tensorboard"
    (planted / "stolen").symlink_to(experiment_work_dir(experiment_id=other.pk) / "tensorboard")
    (planted / "train" / "events.out.tfevents.0.link").symlink_to(
        next((experiment_work_dir(experiment_id=other.pk) / "tensorboard" / "train").iterdir()))
    client = client_for(owner)
    opened = client.get(f"/experiments/tensorboard/?ids={second.pk},{first.pk}")
    key = f"{first.pk}-{second.pk}"
    assert opened["Location"] == f"/tensorboard/{key}/"
    runs = b"".join(client.get(f"/tensorboard/{key}/data/runs").streaming_content).decode()
    assert runs == f'["{first.pk}-a/train", "{second.pk}-b/train"]'
    points = json.loads(b"".join(client.get(
        f"/tensorboard/{key}/data/plugin/scalars/scalars",
        {"run": f"{second.pk}-b/train", "tag": "epoch_loss"}).streaming_content))
    assert len(points) == 3  # its own three points, not the planted file's too

    # A second request finds the same process; a run folder that appears restarts it.
    board = boards.board_open(user=owner, experiment_ids=[first.pk, second.pk])
    assert boards.board_open(user=owner, experiment_ids=[second.pk, first.pk]) == board
    queued = ExperimentFactory(owner=owner, name="later")
    assert boards.board_open(user=owner, experiment_ids=[queued.pk]).runs == {}
    scalars_write(folder=experiment_work_dir(experiment_id=queued.pk) / "tensorboard" / "train",
                  tag="epoch_loss", values=[1.0])
    # Its page reloading its runs finds the new one (the board started again).
    runs = b"".join(client.get(f"/tensorboard/{queued.pk}/data/runs").streaming_content)
    assert runs.decode() == f'["{queued.pk}-later/train"]'

    assert boards.boards_reap(idle_seconds=3600) == []
    assert sorted(boards.boards_reap(idle_seconds=0)) == sorted([key, str(queued.pk)])
    assert not list(Path(boards_here.parent / "boards").glob("*.json"))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile run as the profiler leaves one (`<run>/<host>.xplane.pb`), written once by
    TensorFlow's profiler around a few ops, in a process of its own."""
    logdir = tmp_path_factory.mktemp("trace")
    subprocess.run([sys.executable, "-c", (
        "import sys, tensorflow as tf\n"
        "tf.profiler.experimental.start(sys.argv[1])\n"
        "x = tf.ones([64, 64])\n"
        "for _ in range(3): x = tf.matmul(x, x) / 64.0\n"
        "tf.profiler.experimental.stop()\n"), str(logdir)],
        check=True, capture_output=True, timeout=120)
    (written,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return written.parent


def traced(experiment: Experiment, trace: Path) -> Path:
    """The trace in the experiment's TensorBoard folder, where a trial's profile_steps put it."""
    profiles = experiment_work_dir(experiment_id=experiment.pk) / "tensorboard" / "plugins"
    return Path(shutil.copytree(trace, profiles / "profile" / trace.name))


def profile_get(client: Client, key: Any, route: str, **params: str) -> tuple[int, Any]:
    """A Profile tab query through the proxy: its status and body (xprof gzips every answer)."""
    answer = client.get(f"/tensorboard/{key}/data/plugin/profile/{route}", params)
    body = b"".join(answer.streaming_content) if answer.streaming else answer.content
    if answer.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    try:
        return answer.status_code, json.loads(body)
    except ValueError:
        return answer.status_code, body.decode(errors="replace")


def test_the_profile_tab_shows_an_experiments_trace_and_nothing_else(
    boards_here: Path, trace: Path
) -> None:
    owner = UserFactory()
    experiment = finished(owner=owner, name="digits: mlp")
    traced(experiment, trace)
    theirs = finished(owner=UserFactory(), name="secret")
    their_profile = traced(theirs, trace)
    client = client_for(owner)
    key = experiment.pk
    run = f"{experiment.pk}-digits-mlp/{trace.name}"
    host = next(trace.glob("*.xplane.pb")).name.removesuffix(".xplane.pb")

    listing = json.loads(b"".join(client.get(f"/tensorboard/{key}/data/plugins_listing")
                                  .streaming_content))
    assert listing["profile"]["enabled"] and "profile_redirect" not in listing
    assert profile_get(client, key, "runs") == (200, [run])
    status, tools = profile_get(client, key, "run_tools", run=run)
    assert status == 200 and {"trace_viewer", "overview_page"} <= set(tools)
    assert profile_get(client, key, "hosts", run=run, tag="trace_viewer") == (
        200, [{"hostname": host}])
    status, events = profile_get(client, key, "data", run=run, tag="trace_viewer", host=host)
    assert status == 200 and any(e.get("ph") == "X" for e in events["traceEvents"])
    status, overview = profile_get(client, key, "data", run=run, tag="overview_page", host=host)
    assert status == 200 and overview
    assert profile_get(client, key, "config")[1]["hideCaptureProfileButton"] is True

    # Folders named in the query (xprof's session_path and run_path) are not read: another
    # experiment's profile, or any folder, gives nothing; only the board's runs are named.
    for elsewhere in ({"session_path": str(their_profile)},
                      {"run_path": str(their_profile.parent)},
                      {"session_path": str(their_profile.parent.parent.parent)},
                      {"run_path": "/etc"}):
        assert profile_get(client, key, "runs", **elsewhere) == (200, [run]), elsewhere
        for profile_run in (trace.name, f"{theirs.pk}-secret/{trace.name}"):
            for route, extra in (("run_tools", {}), ("hosts", {"tag": "trace_viewer"}),
                                 ("data", {"tag": "trace_viewer", "host": host}),
                                 ("module_list", {})):
                status, body = profile_get(client, key, route, run=profile_run, **elsewhere,
                                           **extra)
                assert status == 404 and "No profile run" in body, (route, elsewhere, body)
    status, refused = profile_get(client, key, "generate_cache", session_path=str(their_profile))
    assert status == 403 and "error" in refused

    # Capture would make the board connect out to the address given: refused, never attempted.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(1.0)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        for service in (address, f"grpc://{address}"):
            status, refused = profile_get(client, key, "capture_profile", service_addr=service,
                                          duration="100", is_tpu_name="false")
            assert status == 403 and "captures none" in refused["error"]
        with pytest.raises(TimeoutError):
            listener.accept()
    assert not [p for p in (experiment_work_dir(experiment_id=experiment.pk) / "tensorboard"
                            / "plugins").rglob("*") if p.is_file()
                and p.name != next(trace.glob("*.xplane.pb")).name]  # it wrote nothing

    assert client_for(theirs.owner).get(
        f"/tensorboard/{key}/data/plugin/profile/runs").status_code == 404


def test_a_board_of_two_experiments_lists_each_ones_profiles_under_its_run(
    boards_here: Path, trace: Path
) -> None:
    owner = UserFactory()
    first, second = finished(owner=owner, name="a"), finished(owner=owner, name="b")
    other = finished(owner=UserFactory(), name="secret")
    traced(first, trace)
    traced(second, trace)
    # A hostile trial's links: a profile run that is another user's, and a trace file of theirs.
    their_profile = traced(other, trace)
    planted = experiment_work_dir(experiment_id=second.pk) / "tensorboard/plugins/profile"
    (planted / "stolen").symlink_to(their_profile, target_is_directory=True)
    (planted / trace.name / "theirs.xplane.pb").symlink_to(next(their_profile.glob("*.pb")))
    client = client_for(owner)
    key = f"{first.pk}-{second.pk}"
    status, runs = profile_get(client, key, "runs")
    assert status == 200
    assert sorted(runs) == sorted([f"{first.pk}-a/{trace.name}", f"{second.pk}-b/{trace.name}"])
    host = next(trace.glob("*.xplane.pb")).name.removesuffix(".xplane.pb")
    for run in runs:
        assert profile_get(client, key, "hosts", run=run, tag="trace_viewer") == (
            200, [{"hostname": host}])
        status, events = profile_get(client, key, "data", run=run, tag="trace_viewer",
                                     host=host)
        assert status == 200 and any(e.get("ph") == "X" for e in events["traceEvents"])
    assert profile_get(client, key, "run_tools", run=f"{second.pk}-b/stolen")[0] == 404
    assert profile_get(client, key, "data", run=f"{second.pk}-b/{trace.name}",
                       tag="trace_viewer", host="theirs")[0] == 404


def test_the_api_links_an_experiments_tensorboard(boards_here: Path) -> None:
    experiment = ExperimentFactory()
    client = client_for(experiment.owner)
    detail = client.get(f"/api/v1/experiments/{experiment.pk}/").json()
    assert detail["tensorboard_url"] == (
        f"http://testserver/experiments/tensorboard/?ids={experiment.pk}")


def signed_in_page(*, browser: Any, base: str, user: Any) -> Any:
    """A browser page signed in as `user`, on the experiments list."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{base}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/experiments/")
    return page


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_tensorboard_shows_the_scalars_in_a_browser(
    browser: Any, live_server: Any, boards_here: Path
) -> None:
    owner = UserFactory(username="tb-owner")
    experiment = finished(owner=owner, name="digits")
    base = str(live_server.url)
    page = signed_in_page(browser=browser, base=base, user=owner)
    board_page_check(page=page, base=base, experiment_id=experiment.pk, points=3,
                     shot="tensorboard-scalars")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_profile_tab_shows_the_trace_in_a_browser(
    browser: Any, live_server: Any, boards_here: Path, trace: Path
) -> None:
    owner = UserFactory(username="tb-profiler")
    experiment = finished(owner=owner, name="digits")
    traced(experiment, trace)
    base = str(live_server.url)
    page = signed_in_page(browser=browser, base=base, user=owner)
    page.goto(f"{base}/tensorboard/{experiment.pk}/#profile")
    profile = page.frame_locator("iframe")
    # The overview opens first (its charts come from Google's CDN, unreachable here); then the
    # trace viewer, whose events the page fetches through the proxy.
    profile.get_by_text("Overview Page").click(timeout=60_000)
    with page.expect_response(lambda r: "/data/plugin/profile/data?" in r.url
                              and "tag=trace_viewer" in r.url, timeout=60_000) as fetched:
        profile.get_by_role("option", name="Trace Viewer").click()
    events = fetched.value.json()["traceEvents"]
    assert any(e.get("ph") == "X" and e.get("name") == "EagerExecute" for e in events)
    page.wait_for_timeout(2000)  # drawn
    page.screenshot(path=str(ARTIFACTS / "tensorboard-profile.png"), full_page=True)


def board_page_check(*, page: Any, base: str, experiment_id: int, points: int, shot: str) -> None:
    """From the experiment's page, follows its TensorBoard link (signed in) and finds the
    experiment's epoch_loss there, with `points` steps fetched through the proxy."""
    page.goto(f"{base}/experiments/{experiment_id}/")
    fetched: list[Any] = []  # TensorBoard posts a query per card, through the proxy
    page.on("response", lambda r: fetched.append(r) if "/timeseries/timeSeries" in r.url else None)
    page.goto(base + page.get_attribute("#tensorboard", "href"))
    assert page.url.startswith(f"{base}/tensorboard/{experiment_id}/")
    page.wait_for_selector("text=epoch_loss", timeout=60_000)
    # Cards fetch their data once in view: the filter keeps the one looked for in view.
    page.fill("input[placeholder='Filter tags (regex)']", "^epoch_loss$")

    def epoch_loss() -> list[Any]:
        return [s for r in list(fetched) if r.ok for s in r.json() if s.get("tag") == "epoch_loss"]

    deadline = time.monotonic() + 30
    while not epoch_loss() and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    series = epoch_loss()
    assert series, [r.url for r in fetched]
    runs = series[0]["runToSeries"]
    train = [run for run in runs if run.startswith(f"{experiment_id}-") and run.endswith("/train")]
    assert [len(runs[run]) for run in train] == [points], runs
    page.wait_for_selector(f"text={train[0]}")  # the run, in the runs list
    page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
