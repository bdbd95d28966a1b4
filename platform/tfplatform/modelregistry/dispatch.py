"""Messages to the model loader: a version to load, once the transaction that made it commits.
The task is sent by name, as cluster.dispatch does: its module (tasks) runs the services that
call this one, and importing it here would close that circle."""

from celery import current_app
from django.db import transaction

MODELS_QUEUE = "models"
VERSION_LOAD_TASK = "models.version_load"


def version_load_on_commit(*, version_id: int) -> None:
    # Robust: with the broker away the version stays `loading`, and the loader takes it up
    # again when it starts (model_versions_loading_resume).
    transaction.on_commit(
        lambda: current_app.send_task(VERSION_LOAD_TASK, args=[version_id], queue=MODELS_QUEUE),
        robust=True,
    )
