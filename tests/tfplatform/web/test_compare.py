"""The compare page and its CSV: one row per configuration, only what the user may see."""

import csv
import io

import pytest
from django.test import Client

from tests.factories import ExperimentFactory, TeamFactory, UserFactory
from tests.tfplatform.web.training_events import epochs_report
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.comparison import configuration_label, experiments_compare
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_create

pytestmark = pytest.mark.django_db


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def trained(*, owner: object, name: str, rate: float, epochs: int = 3, **shape: int) -> Experiment:
    """A completed experiment whose metrics came through the recorder, as a real run's do."""
    experiment = ExperimentFactory(owner=owner, name=name, target_value=0.7, **shape)
    for state in ("scheduled", "running"):
        experiment = experiment_transition(experiment=experiment, to=state)
    epochs_report(
        trial=trial_create(experiment=experiment), epochs=range(1, epochs + 1), images_per_sec=rate
    )
    return experiment_transition(
        experiment=experiment,
        to="completed",
        strategy="MirroredStrategy" if shape.get("gpus_per_worker", 0) > 1 else "default",
        results={"global_batch_size": 32 * max(1, shape.get("gpus_per_worker", 0))},
    )


def csv_rows(response: object) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("shape", "label"),
    [
        ((1, 0, 0), "CPU"),
        ((1, 1, 0), "1 GPU"),
        ((1, 4, 0), "4 GPUs, 1 node"),
        ((2, 2, 0), "2 workers × 2 GPUs"),
        ((3, 0, 0), "3 workers (CPU)"),
        ((2, 1, 1), "2 workers × 1 GPU + 1 PS"),
    ],
)
def test_configuration_labels_read_like_benchmark_tables(
    shape: tuple[int, int, int], label: str
) -> None:
    workers, gpus, ps = shape
    assert configuration_label(workers=workers, gpus_per_worker=gpus, parameter_servers=ps) == label


def test_compare_rows_median_speedup_and_time_to_target() -> None:
    owner = UserFactory()
    cpu = trained(owner=owner, name="cpu", rate=100.0)
    gpus = trained(owner=owner, name="gpus", rate=400.0, gpus_per_worker=4)
    comparison = experiments_compare(user=owner, ids=[cpu.pk, gpus.pk, 999_999])
    assert comparison.missing == [999_999]
    first, second = comparison.rows
    # Epoch rates are rate+1, rate+2, rate+3; the sampler's (rate-50) readings are left out.
    assert (first.images_per_sec, second.images_per_sec) == (102.0, 402.0)
    assert first.speedup == 1.0 and second.speedup == pytest.approx(402 / 102)
    assert (first.configuration, second.configuration) == ("CPU", "4 GPUs, 1 node")
    assert second.global_batch_size == 128 and second.batch_size == 32
    assert first.val_accuracy == pytest.approx(0.75) and first.accuracy == pytest.approx(0.8)
    assert first.duration_seconds is not None


def test_compare_page_table_chart_and_csv_link() -> None:
    owner = UserFactory()
    cpu = trained(owner=owner, name="cpu run", rate=100.0)
    gpu = trained(owner=owner, name="gpu run", rate=300.0, gpus_per_worker=1)
    html = logged_in(owner).get(f"/experiments/compare/?ids={gpu.pk},{cpu.pk}").content.decode()
    assert html.index("gpu run") < html.index("cpu run")  # in the order asked for
    assert f'href="/experiments/compare.csv?ids={gpu.pk},{cpu.pk}"' in html
    assert 'id="compare-chart"' in html and '"images_per_sec": [302.0, 102.0]' in html
    assert "0.34×" in html  # the CPU run against the GPU run in the first row


def test_list_checkboxes_submit_repeated_ids() -> None:
    owner = UserFactory()
    a, b = ExperimentFactory(owner=owner), ExperimentFactory(owner=owner)
    response = logged_in(owner).get("/experiments/compare/", {"ids": [a.pk, b.pk]})
    assert response.status_code == 200
    assert f'id="row-{a.pk}"' in response.content.decode()
    assert f'id="row-{b.pk}"' in response.content.decode()


def test_compare_without_ids_offers_a_picker() -> None:
    owner = UserFactory()
    experiment = ExperimentFactory(owner=owner, name="pick me")
    ExperimentFactory(name="not yours")
    html = logged_in(owner).get("/experiments/compare/").content.decode()
    assert f'id="pick-{experiment.pk}"' in html and "pick me" in html
    assert "not yours" not in html


def test_csv_has_one_row_per_visible_experiment() -> None:
    owner = UserFactory()
    cpu = trained(owner=owner, name="=HYPERLINK(1)", rate=100.0)
    gpu = trained(owner=owner, name="\t=cmd", rate=300.0, gpus_per_worker=2)
    response = logged_in(owner).get(f"/experiments/compare.csv?ids={cpu.pk},{gpu.pk}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="experiments-compare.csv"'
    rows = csv_rows(response)
    assert [row["id"] for row in rows] == [str(cpu.pk), str(gpu.pk)]
    assert rows[0]["name"] == "'=HYPERLINK(1)"  # a spreadsheet must not run it
    assert rows[1]["name"] == "'\t=cmd"
    assert rows[0]["configuration"] == "CPU" and rows[1]["configuration"] == "2 GPUs, 1 node"
    assert rows[1]["strategy"] == "MirroredStrategy"
    assert rows[1]["images_per_sec_median"] == "302" and rows[1]["speedup"] == "2.9608"
    assert rows[0]["val_accuracy"] == "0.75" and rows[0]["target_value"] == "0.7"
    assert rows[1]["global_batch_size"] == "64"


def test_a_stranger_gets_nothing_of_anothers_experiments() -> None:
    owner = UserFactory()
    secret = trained(owner=owner, name="secret run", rate=100.0)
    stranger = logged_in(UserFactory())
    response = stranger.get(f"/experiments/compare.csv?ids={secret.pk}")
    assert response.status_code == 200
    assert csv_rows(response) == []
    assert "secret" not in response.content.decode()
    html = stranger.get(f"/experiments/compare/?ids={secret.pk}").content.decode()
    assert "secret run" not in html and f"Not found: #{secret.pk}." in html
    # Unknown ids read exactly like someone else's.
    unknown = stranger.get("/experiments/compare/?ids=987654").content.decode()
    assert "Not found: #987654." in unknown


def test_team_mates_and_staff_may_compare() -> None:
    team = TeamFactory()
    owner, mate = UserFactory(team=team), UserFactory(team=team)
    run = trained(owner=owner, name="team run", rate=100.0)
    for viewer in (mate, UserFactory(is_staff=True)):
        rows = csv_rows(logged_in(viewer).get(f"/experiments/compare.csv?ids={run.pk}"))
        assert [row["name"] for row in rows] == ["team run"]


@pytest.mark.parametrize(
    "ids", ["abc", "1,x", "-1", "1.5", "²", "9" * 30, ",".join(str(n) for n in range(1, 30))]
)
def test_bad_ids_are_400(ids: str) -> None:
    client = logged_in(UserFactory())
    page = client.get("/experiments/compare/", {"ids": ids})
    assert page.status_code == 400 and 'id="compare-error"' in page.content.decode()
    assert client.get("/experiments/compare.csv", {"ids": ids}).status_code == 400


def test_csv_needs_ids_and_a_login() -> None:
    assert logged_in(UserFactory()).get("/experiments/compare.csv").status_code == 400
    assert Client().get("/experiments/compare.csv?ids=1").status_code == 302
