from django.apps import AppConfig


class ModelRegistryConfig(AppConfig):
    name = "tfplatform.modelregistry"
    label = "modelregistry"
    verbose_name = "Model registry"
