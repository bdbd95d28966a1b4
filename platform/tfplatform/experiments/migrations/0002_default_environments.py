from django.db import migrations

DEFAULTS = [
    ("tensorflow-2.21-cpu", "tensorflow/tensorflow:2.21.0", False),
    ("tensorflow-2.21-gpu", "tensorflow/tensorflow:2.21.0-gpu", True),
]


def create_defaults(apps, schema_editor):  # type: ignore[no-untyped-def]
    environment = apps.get_model("experiments", "Environment")
    for name, image, gpu in DEFAULTS:
        environment.objects.get_or_create(
            name=name,
            defaults={"image": image, "tensorflow_version": "2.21.0", "gpu_capable": gpu},
        )


class Migration(migrations.Migration):
    dependencies = [("experiments", "0001_initial")]
    operations = [migrations.RunPython(create_defaults, migrations.RunPython.noop)]
