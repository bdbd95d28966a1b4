from celery import shared_task

from tfplatform.modelregistry.services import model_version_load


# One version at a time per loader; a loader that dies mid-load gets the message again (late
# acknowledgement), and loading a version that is no longer LOADING does nothing.
@shared_task(name="models.version_load", ignore_result=True, acks_late=True)
def model_version_load_task(version_id: int) -> None:
    model_version_load(version_id=version_id)
