from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "tfplatform.accounts"
    label = "accounts"
