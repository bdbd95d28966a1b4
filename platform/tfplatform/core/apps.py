from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "tfplatform.core"
    label = "core"
