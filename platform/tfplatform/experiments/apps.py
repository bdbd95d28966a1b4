from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "tfplatform.experiments"
    label = "experiments"

    def ready(self) -> None:
        from tfplatform.accounts.storage import storage_counter_register
        from tfplatform.experiments.selectors.experiments import upload_bytes_of

        storage_counter_register(name=self.label, counter=upload_bytes_of)
