"""The Celery application. Start workers through `manage.py worker`, which puts platform/ on
the path, registers the node and consumes its queue."""

import os

from celery import Celery
from celery.signals import task_prerun

from tfplatform.core.liveness import LivenessStep

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tfplatform.config.settings")

app = Celery("tfplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each worker touches PLATFORM_LIVENESS_FILE from its timer, for container health checks.
app.steps["worker"].add(LivenessStep)
app.autodiscover_tasks(
    ["tfplatform.experiments", "tfplatform.modelregistry", "tfplatform.searches",
     "tfplatform.notifications"]
)


@task_prerun.connect
def _content_types_forget(**_: object) -> None:
    """Generic references (an allocation's holder) resolve through ContentType's per-process
    cache; a worker lives longer than a database restore or a test's flush, so each task reads
    the few it needs afresh."""
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
