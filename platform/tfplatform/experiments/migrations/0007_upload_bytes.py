"""Each experiment records what its uploads take, for its owner's storage quota; uploads made
before are measured on disk."""

import contextlib
from typing import Any

from django.db import migrations, models


def uploads_measure(apps: Any, schema_editor: Any) -> None:
    Experiment = apps.get_model("experiments", "Experiment")
    for experiment in Experiment.objects.exclude(model_file="", dataset_file=""):
        size = 0
        for upload in (experiment.model_file, experiment.dataset_file):
            if upload:
                with contextlib.suppress(OSError):  # removed by hand: takes nothing
                    size += upload.size
        Experiment.objects.filter(pk=experiment.pk).update(upload_bytes=size)


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0006_results_without_node_paths"),
    ]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="upload_bytes",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(uploads_measure, migrations.RunPython.noop),
    ]
