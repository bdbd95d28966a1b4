"""Run by test_upgrade.py in a process of its own, on an empty database of its own:
migrates to a release's schema, writes rows through that release's models (Django's historical
ones), migrates to this release and prints, as JSON, what the rows are now.

    python tests/tfplatform/operations/upgrade_run.py 0.1.0
"""

import json
import sys
from datetime import UTC, datetime
from typing import Any

import django

django.setup()

from django.contrib.contenttypes.models import ContentType  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.migrations.executor import MigrationExecutor  # noqa: E402

from tfplatform.operations.releases import RELEASES  # noqa: E402


def rows_write(apps: Any) -> int:
    """What an installation of that release held: a team, two users, a node with a GPU, a
    completed experiment whose trial held the GPU, a workspace session, a model with a label,
    and the content types `migrate` had made for them. The workspace's, whose id it returns,
    is what admin history and permissions of workspaces name."""
    now = datetime.now(UTC)
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in ("trial", "workspace"):
        content_type.objects.create(app_label="experiments", model=model)
    team = apps.get_model("accounts", "Team").objects.create(name="vision", gpu_quota=4)
    user = apps.get_model("accounts", "User")
    ada = user.objects.create(username="ada", password="x", team=team)
    user.objects.create(username="bob", password="x")
    node = apps.get_model("cluster", "Node").objects.create(hostname="gpu-1", queue="node.gpu-1")
    gpu = apps.get_model("cluster", "Device").objects.create(node=node, kind="gpu", index=0,
                                                             name="A100")
    experiment_model = apps.get_model("experiments", "Experiment")
    experiment = experiment_model.objects.create(owner=ada, team=team, name="resnet",
                                                 model="mlp", dataset="digits", state="completed")
    trial = apps.get_model("experiments", "Trial").objects.create(
        experiment=experiment, state="completed", started_at=now, finished_at=now)
    apps.get_model("cluster", "Allocation").objects.create(trial=trial, node=node, device=gpu,
                                                           started_at=now, released_at=now)
    apps.get_model("experiments", "Metric").objects.create(trial=trial, name="val_accuracy",
                                                           step=1, value=0.9, recorded_at=now)
    session = experiment_model.objects.create(owner=ada, team=team, name="lab", model="workspace",
                                              dataset="", state="running")
    apps.get_model("experiments", "Workspace").objects.create(owner=ada, team=team, name="lab",
                                                              experiment=session, gpus=0)
    registered = apps.get_model("modelregistry", "RegisteredModel").objects.create(
        name="digits", owner=ada, team=team)
    version = apps.get_model("modelregistry", "ModelVersion").objects.create(
        model=registered, version=1, path="/models/digits/1", state="available",
        source_experiment=experiment)
    apps.get_model("modelregistry", "ModelLabel").objects.create(model=registered,
                                                                 label="stable", version=version)
    return int(content_type.objects.get(app_label="experiments", model="workspace").pk)


def rows_read(*, workspace_type: int) -> dict[str, Any]:
    """The same rows through this release's models and selectors."""
    from tfplatform.cluster.models import Allocation
    from tfplatform.experiments.models import Experiment, Trial
    from tfplatform.modelregistry.services.sync import model_server_entries
    from tfplatform.workspaces.models import Workspace

    [allocation] = Allocation.objects.all()
    trial = Trial.objects.get(experiment__name="resnet")
    workspace = Workspace.objects.get(name="lab")
    return {
        "allocation_holder": [allocation.holder_type.model, allocation.holder_id == trial.pk],
        "trial_allocations": list(trial.allocations.values_list("device__name", flat=True)),
        "workspace": [workspace.owner.username, workspace.experiment.name, workspace.team.name],
        "workspace_content_type": [ContentType.objects.get_for_model(Workspace).app_label,
                                   ContentType.objects.get_for_model(Workspace).pk
                                   == workspace_type],
        "experiments": sorted(Experiment.objects.values_list("name", flat=True)),
        "metrics": list(trial.metrics.values_list("name", "value")),
        "served": [[e.name, list(e.versions), e.labels] for e in model_server_entries()],
    }


def main() -> None:
    targets = list(RELEASES[sys.argv[1]].items())
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    workspace_type = rows_write(MigrationExecutor(connection).loader.project_state(targets).apps)
    call_command("migrate", verbosity=0)
    print(json.dumps(rows_read(workspace_type=workspace_type)))


if __name__ == "__main__":
    main()
