from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "tfplatform.operations"
    label = "operations"
    verbose_name = "Operations (backup and restore)"
