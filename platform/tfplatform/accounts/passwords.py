"""Django calls every password validator's `password_changed` when a user's new password is
saved (set_password then save: the password change pages, the admin, `changepassword`)."""

from typing import Any

from tfplatform.accounts.tokens import api_tokens_revoke_all
from tfplatform.audit.middleware import request_user


class TokensRevokedOnPasswordChange:
    """Not a rule for passwords: a changed password ends every API token its owner had, so a
    leaked token does not outlive the password change meant to lock the thief out."""

    def validate(self, password: str, user: Any = None) -> None:
        return None

    def password_changed(self, password: str, user: Any = None) -> None:
        if user is not None and user.pk is not None:
            # Django hands a validator only whose password it is; who changed it (the user,
            # staff in the admin, nobody for `changepassword`) is the request's.
            api_tokens_revoke_all(user=user, actor=request_user())

    def get_help_text(self) -> str:
        return "Changing your password revokes your API tokens."
