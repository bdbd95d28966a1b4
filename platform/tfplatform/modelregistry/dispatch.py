"""Messages to the model loader: a version to load, once the transaction that made it commits."""

from django.db import transaction

MODELS_QUEUE = "models"


def version_load_on_commit(*, version_id: int) -> None:
    from tfplatform.modelregistry.tasks import model_version_load_task

    # Robust: with the broker away the version stays `loading`, and the loader takes it up
    # again when it starts (model_versions_loading_resume).
    transaction.on_commit(
        lambda: model_version_load_task.apply_async(args=[version_id], queue=MODELS_QUEUE),
        robust=True,
    )
