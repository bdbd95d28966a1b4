from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "tfplatform.cluster"
    label = "cluster"
