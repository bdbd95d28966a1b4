"""Experiments' results no longer carry paths on the worker nodes (see execution.NODE_PATHS);
rows recorded before keep their facts and say whether a model was exported."""

from typing import Any

from django.db import migrations

NODE_PATHS = ("attempt_dir", "export_path", "best_checkpoint_path")


def results_strip(apps: Any, schema_editor: Any) -> None:
    experiment_model = apps.get_model("experiments", "Experiment")
    for experiment in experiment_model.objects.exclude(results={}).only("pk", "results"):
        results = dict(experiment.results or {})
        if not any(key in results for key in NODE_PATHS):
            continue
        results.setdefault("exported", bool(results.get("export_path")))
        for key in NODE_PATHS:
            results.pop(key, None)
        experiment_model.objects.filter(pk=experiment.pk).update(results=results)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0005_environment_build")]

    operations = [migrations.RunPython(results_strip, migrations.RunPython.noop)]
