"""When a trial's messages last reached the broker. Trials from before were dispatched when
they were made, so the scheduler's sweep does not send them all again."""

from typing import Any

from django.db import migrations, models
from django.db.models import F


def dispatched_when_made(apps: Any, schema_editor: Any) -> None:
    Trial = apps.get_model("experiments", "Trial")
    Trial.objects.update(dispatched_at=F("created_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0007_upload_bytes"),
    ]

    operations = [
        migrations.AddField(
            model_name="trial",
            name="dispatched_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(dispatched_when_made, migrations.RunPython.noop),
    ]
