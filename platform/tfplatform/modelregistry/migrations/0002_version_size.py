"""Each version records what its files take, for its owner's storage quota; versions published
before are measured on disk."""

from pathlib import Path
from typing import Any

from django.db import migrations, models

from serving.layout import tree_bytes


def sizes_measure(apps: Any, schema_editor: Any) -> None:
    ModelVersion = apps.get_model("modelregistry", "ModelVersion")
    for version in ModelVersion.objects.all().only("pk", "path"):
        size = tree_bytes(root=Path(version.path)) if version.path else 0
        ModelVersion.objects.filter(pk=version.pk).update(size_bytes=size)


class Migration(migrations.Migration):
    dependencies = [
        ("modelregistry", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelversion",
            name="size_bytes",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(sizes_measure, migrations.RunPython.noop),
    ]
