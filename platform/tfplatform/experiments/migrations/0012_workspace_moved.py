# The Workspace model moved to the workspaces app (tfplatform.workspaces, 0001_initial). Its
# table, experiments_workspace, stays as it is, rows included: only Django's state forgets it here.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0011_cpu_slots"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Workspace")],
            database_operations=[],
        ),
    ]
