from celery import shared_task

from tfplatform.modelregistry.dispatch import VERSION_LOAD_TASK
from tfplatform.modelregistry.services.versions import (
    ModelServerUnreachable,
    model_version_load,
)

RETRIES = 30


# One version at a time per loader. A loader that dies mid-load leaves the version LOADING, and
# the next one takes it up as it starts (model_versions_loading_resume); loading a version that
# is no longer LOADING does nothing, so a copy of the message is harmless. A server that does
# not answer yet (it starts after the loader) is waited for: retried with backoff up to a
# minute apart for about half an hour, then the loader's tidy loop sends it again.
@shared_task(name=VERSION_LOAD_TASK, ignore_result=True,
             autoretry_for=(ModelServerUnreachable,), retry_backoff=2, retry_backoff_max=60,
             max_retries=RETRIES)
def model_version_load_task(version_id: int) -> None:
    model_version_load(version_id=version_id)
