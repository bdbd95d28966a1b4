"""The login page: local accounts' form, and "Sign in with <provider>" where single sign-on is
configured (accounts/oidc.py)."""

from typing import Any

from django.contrib.auth import views as auth_views

from tfplatform.accounts.oidc_provider import oidc_enabled, oidc_provider_name


class SignInPage(auth_views.LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_provider"] = oidc_provider_name() if oidc_enabled() else ""
        return context
