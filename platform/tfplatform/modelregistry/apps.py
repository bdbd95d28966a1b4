from django.apps import AppConfig


class ModelRegistryConfig(AppConfig):
    name = "tfplatform.modelregistry"
    label = "modelregistry"
    verbose_name = "Model registry"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from tfplatform.accounts.models import ApiToken, User
        from tfplatform.accounts.storage import storage_counter_register
        from tfplatform.experiments.signals import scheduler_passed
        from tfplatform.modelregistry.models import ModelLabel, RegisteredModel
        from tfplatform.modelregistry.receivers import (
            serving_access_on_change,
            serving_access_on_scheduler_pass,
            serving_health_on_scheduler_pass,
        )
        from tfplatform.modelregistry.selectors.models import version_bytes_of

        storage_counter_register(name=self.label, counter=version_bytes_of)
        scheduler_passed.connect(serving_health_on_scheduler_pass, dispatch_uid="serving-health")
        scheduler_passed.connect(serving_access_on_scheduler_pass, dispatch_uid="serving-access")
        # What the model server's front knows (selectors/access.py) is these rows.
        for model in (ApiToken, User, RegisteredModel, ModelLabel):
            for signal in (post_save, post_delete):
                signal.connect(serving_access_on_change, sender=model,
                               dispatch_uid=f"serving-access-{model.__name__}-{signal}")
