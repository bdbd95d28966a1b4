from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "tfplatform.web"
    label = "web"
