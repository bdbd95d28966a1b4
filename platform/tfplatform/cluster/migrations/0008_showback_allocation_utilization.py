import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0007_device_uuid"),
    ]

    operations = [
        migrations.CreateModel(
            name="AllocationUtilization",
            fields=[
                (
                    "allocation",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="utilization",
                        serialize=False,
                        to="cluster.allocation",
                    ),
                ),
                ("samples", models.PositiveIntegerField(default=0)),
                ("percent_sum", models.FloatField(default=0.0)),
                ("last_percent", models.FloatField(default=0.0)),
                ("first_at", models.DateTimeField()),
                ("last_at", models.DateTimeField()),
                ("busy_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
