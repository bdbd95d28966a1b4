# The Workspace model, moved here from the experiments app (experiments 0012_workspace_moved):
# its table keeps the name experiments_workspace and its rows, so only Django's state is made
# here. Its content type moves with it, so permissions and admin history that name it stay.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_move(apps, schema_editor):  # type: ignore[no-untyped-def]
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="workspaces", model="workspace").exists():
        content_type.objects.filter(app_label="experiments", model="workspace").update(
            app_label="workspaces")


def content_type_back(apps, schema_editor):  # type: ignore[no-untyped-def]
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label="experiments", model="workspace").exists():
        content_type.objects.filter(app_label="workspaces", model="workspace").update(
            app_label="experiments")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("accounts", "0005_workspaces"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("experiments", "0012_workspace_moved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Workspace",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        ("gpus", models.PositiveIntegerField(default=0)),
                        ("cpu_slots", models.PositiveIntegerField(default=1)),
                        ("priority", models.IntegerField(default=0)),
                        ("last_activity_at", models.DateTimeField(blank=True, null=True)),
                        ("ready_at", models.DateTimeField(blank=True, null=True)),
                        ("stop_reason", models.CharField(blank=True, max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "api_token",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="accounts.apitoken",
                            ),
                        ),
                        (
                            "environment",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="workspaces",
                                to="experiments.environment",
                            ),
                        ),
                        (
                            "experiment",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="experiments.experiment",
                            ),
                        ),
                        (
                            "owner",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="workspaces",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "experiments_workspace",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_move, content_type_back),
    ]
