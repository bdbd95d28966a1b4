from django.apps import AppConfig


class ModelRegistryConfig(AppConfig):
    name = "tfplatform.modelregistry"
    label = "modelregistry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        from tfplatform.accounts.storage import storage_counter_register
        from tfplatform.experiments.signals import scheduler_passed
        from tfplatform.modelregistry.receivers import serving_health_on_scheduler_pass
        from tfplatform.modelregistry.selectors.models import version_bytes_of

        storage_counter_register(name=self.label, counter=version_bytes_of)
        scheduler_passed.connect(serving_health_on_scheduler_pass, dispatch_uid="serving-health")
