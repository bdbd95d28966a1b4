from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "tfplatform.notifications"
    label = "notifications"
