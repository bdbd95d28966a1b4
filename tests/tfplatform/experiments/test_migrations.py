"""Data migrations of the experiments app, run against rows as they were before."""

from importlib import import_module

import pytest
from django.apps import apps

from tests.factories import ExperimentFactory
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db


def test_results_recorded_with_node_paths_lose_them_and_say_what_was_exported() -> None:
    strip = import_module("tfplatform.experiments.migrations.0006_results_without_node_paths")
    old = ExperimentFactory(results={
        "export_path": "/srv/work/experiment-1/export", "attempt_dir": "/srv/runs/1",
        "best_checkpoint_path": "/srv/work/experiment-1/best", "epochs_completed": 3,
    })
    failed = ExperimentFactory(results={"attempt_dir": "/srv/runs/2", "epochs_completed": 1})
    untouched = ExperimentFactory(results={"epochs_completed": 4, "exported": True})

    strip.results_strip(apps, None)

    assert Experiment.objects.get(pk=old.pk).results == {"epochs_completed": 3, "exported": True}
    assert Experiment.objects.get(pk=failed.pk).results == {"epochs_completed": 1,
                                                            "exported": False}
    assert Experiment.objects.get(pk=untouched.pk).results == {"epochs_completed": 4,
                                                               "exported": True}
