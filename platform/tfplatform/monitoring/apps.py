from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "tfplatform.monitoring"
    label = "monitoring"

    def ready(self) -> None:
        from tfplatform.monitoring.task_metrics import task_signals_connect

        task_signals_connect()
