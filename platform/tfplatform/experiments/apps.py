from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "tfplatform.experiments"
    label = "experiments"
