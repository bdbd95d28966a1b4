from django.apps import AppConfig


class SearchesConfig(AppConfig):
    name = "tfplatform.searches"
    label = "searches"
    verbose_name = "Hyperparameter searches"

    def ready(self) -> None:
        from tfplatform.experiments.signals import experiment_finished, scheduler_passed
        from tfplatform.searches.receivers import (
            search_member_finished,
            searches_on_scheduler_pass,
        )

        experiment_finished.connect(search_member_finished, dispatch_uid="search-member")
        scheduler_passed.connect(searches_on_scheduler_pass, dispatch_uid="search-overdue")
