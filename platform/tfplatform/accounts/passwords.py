"""Django calls every password validator's `password_changed` when a user's new password is
saved (set_password then save: the password change pages, the admin, `changepassword`)."""

from typing import Any

from tfplatform.accounts.tokens import api_tokens_revoke_all


class TokensRevokedOnPasswordChange:
    """Not a rule for passwords: a changed password ends every API token its owner had, so a
    leaked token does not outlive the password change meant to lock the thief out."""

    def validate(self, password: str, user: Any = None) -> None:
        return None

    def password_changed(self, password: str, user: Any = None) -> None:
        if user is not None and user.pk is not None:
            api_tokens_revoke_all(user=user)

    def get_help_text(self) -> str:
        return "Changing your password revokes your API tokens."
