from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "tfplatform.audit"
    label = "audit"
