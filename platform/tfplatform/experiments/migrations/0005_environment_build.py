import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("cluster", "0004_node_trial_runtime"),
        ("experiments", "0004_trial_runtime_tensorflow_version"),
    ]

    operations = [
        migrations.CreateModel(
            name="EnvironmentBuild",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("building", "Building"),
                            ("ready", "Ready"),
                            ("failed", "Failed"),
                        ],
                        default="building",
                        max_length=20,
                    ),
                ),
                ("log", models.TextField(blank=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "environment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="builds",
                        to="experiments.environment",
                    ),
                ),
                (
                    "node",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="environment_builds",
                        to="cluster.node",
                    ),
                ),
            ],
            options={
                "ordering": ["environment__name", "node__hostname"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("environment", "node", "key"), name="environment_build_unique"
                    )
                ],
            },
        ),
    ]
