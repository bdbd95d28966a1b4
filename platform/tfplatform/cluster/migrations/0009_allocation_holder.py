# An allocation's holder becomes a generic reference (content type + id) instead of a foreign
# key to experiments.Trial: this app sits below the experiments app. Every existing allocation
# keeps its trial as its holder; the trial's GenericRelation still deletes its allocations.

import django.db.models.deletion
from django.db import migrations, models


def holders_from_trials(apps, schema_editor):  # type: ignore[no-untyped-def]
    content_type = apps.get_model("contenttypes", "ContentType")
    allocation = apps.get_model("cluster", "Allocation")
    trial_type, _ = content_type.objects.get_or_create(app_label="experiments", model="trial")
    allocation.objects.update(holder_type=trial_type, holder_id=models.F("trial_id"))


def trials_from_holders(apps, schema_editor):  # type: ignore[no-untyped-def]
    content_type = apps.get_model("contenttypes", "ContentType")
    allocation = apps.get_model("cluster", "Allocation")
    trial_type = content_type.objects.filter(app_label="experiments", model="trial").first()
    held = allocation.objects.filter(holder_type=trial_type)
    # Anything but a trial could not be held before: it goes, as it could not be kept.
    allocation.objects.exclude(pk__in=held.values("pk")).delete()
    held.update(trial_id=models.F("holder_id"))


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0008_showback_allocation_utilization"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("experiments", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="holder_type",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="contenttypes.contenttype",
            ),
        ),
        migrations.AddField(
            model_name="allocation",
            name="holder_id",
            field=models.PositiveBigIntegerField(null=True),
        ),
        # Nullable first, so that going back can add the column again before filling it.
        migrations.AlterField(
            model_name="allocation",
            name="trial",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="allocations",
                to="experiments.trial",
            ),
        ),
        migrations.RunPython(holders_from_trials, trials_from_holders),
        migrations.RemoveField(model_name="allocation", name="trial"),
        migrations.AlterField(
            model_name="allocation",
            name="holder_type",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="contenttypes.contenttype",
            ),
        ),
        migrations.AlterField(
            model_name="allocation",
            name="holder_id",
            field=models.PositiveBigIntegerField(),
        ),
        migrations.AddIndex(
            model_name="allocation",
            index=models.Index(fields=["holder_type", "holder_id"], name="allocation_holder"),
        ),
    ]
