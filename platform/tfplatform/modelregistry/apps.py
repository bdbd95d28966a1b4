from django.apps import AppConfig


class ModelRegistryConfig(AppConfig):
    name = "tfplatform.modelregistry"
    label = "modelregistry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        from tfplatform.accounts.storage import storage_counter_register
        from tfplatform.modelregistry.selectors import version_bytes_of

        storage_counter_register(name=self.label, counter=version_bytes_of)
