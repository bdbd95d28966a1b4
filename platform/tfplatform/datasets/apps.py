from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "tfplatform.datasets"
    label = "datasets"
    verbose_name = "Registered datasets"
