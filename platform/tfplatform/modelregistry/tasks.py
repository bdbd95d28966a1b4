from celery import shared_task

from tfplatform.modelregistry.dispatch import VERSION_LOAD_TASK
from tfplatform.modelregistry.services.versions import model_version_load


# One version at a time per loader. A loader that dies mid-load leaves the version LOADING, and
# the next one takes it up as it starts (model_versions_loading_resume); loading a version that
# is no longer LOADING does nothing, so a copy of the message is harmless.
@shared_task(name=VERSION_LOAD_TASK, ignore_result=True)
def model_version_load_task(version_id: int) -> None:
    model_version_load(version_id=version_id)
