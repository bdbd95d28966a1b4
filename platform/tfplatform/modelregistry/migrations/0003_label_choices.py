"""A label's names are the model's choices (stable, canary); no row changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("modelregistry", "0002_version_size"),
    ]

    operations = [
        migrations.AlterField(
            model_name="modellabel",
            name="label",
            field=models.CharField(
                choices=[("stable", "Stable"), ("canary", "Canary")], max_length=50
            ),
        ),
    ]
