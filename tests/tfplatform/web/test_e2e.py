"""The whole product in a real Chromium: launch from the form, watch it train, deploy, predict.

A live server, a real Celery worker node that trains with TensorFlow, and the embedded model
server; a second user then finds none of it. Every page is photographed into ARTIFACTS.
"""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests import live
from tests.factories import PASSWORD, UserFactory
from tests.tfplatform.web.conftest import ARTIFACTS
from tests.tfplatform.web.test_tensorboard import board_page_check
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

EPOCHS = 3
# Small batches make each epoch last seconds, so the charts visibly fill in while it runs.
BATCH_SIZE = 2
POINTS = "Chart.getChart('accuracy-chart').data.datasets[1].data.length"


def login(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/experiments/")


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_launch_watch_deploy_predict_then_a_stranger_sees_nothing(
    browser: Any, live_server: Any, worker_node: tuple[str, Path], model_server: dict[str, Any]
) -> None:
    _, log = worker_node
    UserFactory(username="alice")
    UserFactory(username="bob")
    UserFactory(username="operator", is_staff=True)
    base = str(live_server.url)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, base, "alice")
    shot(page, "01-experiments-empty")

    page.click("nav >> text=New experiment")
    # The form's script runs at the end of the page: until "load" the upload fields still show.
    page.wait_for_load_state("load")
    outlook = page.inner_text("#resources-outlook")
    assert "1 CPU slot" in outlook and "could start right away" in outlook, outlook
    assert page.is_hidden("#field-model_file") and page.is_hidden("#field-dataset_file")
    page.select_option("#id_model", "resnet20")  # the form proposes each model's defaults
    assert page.input_value("#id_epochs") == "60" and page.input_value("#id_optimizer") == "sgd"
    page.select_option("#id_model", "upload")
    assert page.is_visible("#field-model_file")
    page.fill("#id_name", "digits e2e")
    page.select_option("#id_model", "mlp")
    assert page.input_value("#id_epochs") == "20" and page.is_hidden("#field-model_file")
    page.select_option("#id_dataset", "digits")
    page.fill("#id_epochs", str(EPOCHS))
    page.fill("#id_batch_size", str(BATCH_SIZE))
    page.fill("#id_learning_rate", "0.01")
    page.fill("#id_target_value", "0.8")
    page.fill("#id_workers", "2")  # one CPU slot: the hint says so, live
    page.wait_for_function("document.querySelector('#fit')?.textContent.includes('Never fits')")
    page.fill("#id_workers", "1")
    page.wait_for_function("document.querySelector('#fit')?.textContent.includes('right away')")
    shot(page, "02-new-experiment")
    page.click("button:has-text('Launch')")
    page.wait_for_selector("#state")
    experiment_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    detail_url = page.url
    # A reload would lose this marker: the charts and status must update in place.
    page.evaluate("window.__sameDocument = true")

    counts = [page.evaluate(POINTS)]
    page.wait_for_function(f"{POINTS} >= 1", timeout=120_000)
    shot(page, "03-experiment-running")
    deadline = time.monotonic() + 240
    while page.inner_text("#state") not in live.FINISHED:
        counts.append(page.evaluate(POINTS))
        assert live.experiment_state(experiment_id) not in ("failed", "canceled"), (
            Experiment.objects.get(pk=experiment_id).error,
            log.read_text()[-3000:],
        )
        assert time.monotonic() < deadline, f"never finished\n{log.read_text()[-3000:]}"
        page.wait_for_timeout(500)
    page.wait_for_function(f"{POINTS} === {EPOCHS}")
    counts.append(page.evaluate(POINTS))
    assert page.evaluate("window.__sameDocument") is True
    assert page.inner_text("#state") == "completed"
    assert counts == sorted(counts) and counts[0] < counts[-1] == EPOCHS, counts
    assert page.evaluate("Chart.getChart('loss-chart').data.datasets[0].data.length") == EPOCHS
    assert page.evaluate("Chart.getChart('throughput-chart').data.datasets[1].data.length") >= 1
    assert page.inner_text("#strategy") != "not chosen yet"
    assert "epoch 3 / 3" in page.inner_text("#live")
    assert "No output yet." not in page.inner_text("#logs")
    shot(page, "04-experiment-completed")
    # Its TensorBoard through the platform: the scalars the trial's chief wrote, every epoch.
    board_page_check(page=page, base=base, experiment_id=experiment_id, points=EPOCHS,
                     shot="04-tensorboard")
    page.goto(detail_url)

    # Restart runs the same configuration as a new experiment; cancel stops it again.
    page.click("#restart")
    page.wait_for_url(lambda url: url != detail_url)
    rerun_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert rerun_id != experiment_id
    assert Experiment.objects.get(pk=rerun_id).hyperparameters["batch_size"] == BATCH_SIZE
    page.click("#cancel")
    # `?.`: between the form's POST and the page it redirects to there is no #state to read.
    page.wait_for_function(
        "document.querySelector('#state')?.textContent === 'canceled'", timeout=60_000
    )

    page.goto(f"{base}/experiments/")
    page.check(f"#pick-{experiment_id}")
    page.check(f"#pick-{rerun_id}")
    shot(page, "05-experiments-list")
    page.click("#compare-button")
    page.wait_for_selector("#comparison")
    assert "CPU" in page.inner_text(f"#row-{experiment_id}")
    # The table is there before the scripts at the end of the page have drawn the chart.
    page.wait_for_function("window.Chart && Chart.getChart('compare-chart')", timeout=30_000)
    assert page.evaluate("Chart.getChart('compare-chart').data.datasets[0].data[0]") > 0
    board_ids = page.get_attribute("#tensorboard", "href").split("?ids=")[1].split(",")
    assert sorted(board_ids) == sorted([str(experiment_id), str(rerun_id)])
    shot(page, "06-compare")

    page.goto(detail_url)
    page.fill("#deploy input[name=model_name]", "digits-e2e")
    page.click("#deploy button")
    page.wait_for_url(f"{base}/models/digits-e2e/", timeout=120_000)
    # The version loads in the background; the page follows it until it is available.
    page.wait_for_selector("#versions .state-available", timeout=120_000)
    assert page.query_selector("#loading-note") is None
    page.goto(f"{base}/models/")
    assert "digits-e2e" in page.inner_text("#models")
    shot(page, "07-models")

    page.click("text=digits-e2e")
    from sklearn.datasets import load_digits

    pixels = load_digits().data[:3].tolist()
    page.fill("#try-body", json.dumps({"instances": pixels}))
    page.click("#try-it button")
    page.wait_for_function("document.querySelector('#try-answer')?.textContent.includes('HTTP')")
    answer = page.inner_text("#try-answer")
    assert answer.startswith("HTTP 200"), answer
    body = json.loads(answer.split("\n", 1)[1])
    classes = [row["class_id"] for row in body["predictions"]]
    assert len(classes) == 3 and all(c in range(10) for c in classes), body
    shot(page, "08-model-try-it")

    stranger = browser.new_page(viewport={"width": 1280, "height": 900})
    login(stranger, base, "bob")
    assert "digits e2e" not in stranger.inner_text("main")
    assert stranger.goto(detail_url).status == 404
    assert stranger.goto(f"{detail_url}charts.json").status == 404
    assert stranger.goto(f"{base}/experiments/tensorboard/?ids={experiment_id}").status == 404
    assert stranger.goto(f"{base}/tensorboard/{experiment_id}/").status == 404
    stranger.goto(f"{base}/models/")
    assert "digits-e2e" not in stranger.inner_text("main")
    csv = stranger.request.get(f"{base}/experiments/compare.csv?ids={experiment_id}")
    assert csv.status == 200 and csv.text().strip().splitlines() == [csv.text().splitlines()[0]]
    stranger.goto(f"{base}/experiments/compare/?ids={experiment_id}")
    assert "digits e2e" not in stranger.inner_text("main")

    operator = browser.new_page(viewport={"width": 1280, "height": 900})
    login(operator, base, "operator")
    operator.goto(f"{base}/cluster/")
    assert operator.inner_text("h1") == "Cluster"
    shot(operator, "09-cluster")
