"""The Celery application. Start workers through `manage.py worker`, which puts platform/ on
the path, registers the node and consumes its queue."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tfplatform.config.settings")

app = Celery("tfplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    ["tfplatform.experiments", "tfplatform.modelregistry", "tfplatform.searches"]
)
