from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "tfplatform.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from tfplatform.accounts.models import User
        from tfplatform.accounts.receivers import token_cache_on_user_save

        post_save.connect(token_cache_on_user_save, sender=User,
                          dispatch_uid="token-cache-user-save")
