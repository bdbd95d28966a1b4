from django.db import migrations, models


class Migration(migrations.Migration):
    """Any metric as the target (training/target.py): the accuracy target becomes its value."""

    dependencies = [("experiments", "0008_trial_dispatched_at")]

    operations = [
        migrations.RenameField(
            model_name="experiment", old_name="target_accuracy", new_name="target_value"
        ),
        migrations.AddField(
            model_name="experiment",
            name="target_metric",
            field=models.CharField(default="val_accuracy", max_length=100),
        ),
        migrations.AddField(
            model_name="experiment",
            name="target_mode",
            field=models.CharField(default="max", max_length=3),
        ),
    ]
