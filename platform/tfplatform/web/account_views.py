"""Your account: API tokens (issue, list, revoke) and your password, whose change revokes them."""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from tfplatform.accounts import tokens
from tfplatform.web.forms import TokenForm


@never_cache  # it shows a new key once
@login_required
def token_list_page(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        _, issued = tokens.api_token_issue(
            user=request.user,  # type: ignore[arg-type]
            name=form.cleaned_data["name"], days=form.cleaned_data["days"], actor=request.user)
        form = TokenForm()
    found = tokens.api_token_list(user=request.user)  # type: ignore[arg-type]
    return render(request, "account/tokens.html",
                  {"tokens": found, "form": form, "issued": issued})


@login_required
@require_POST
def token_revoke_action(request: HttpRequest, token_id: int) -> HttpResponse:
    tokens.api_token_revoke(user=request.user, token_id=token_id,  # type: ignore[arg-type]
                            actor=request.user)
    messages.success(request, "Token revoked.")
    return redirect("account-tokens")


class PasswordChangePage(auth_views.PasswordChangeView):
    template_name = "account/password.html"
    success_url = reverse_lazy("account-tokens")

    def form_valid(self, form):  # type: ignore[no-untyped-def]
        answer = super().form_valid(form)
        messages.success(self.request,
                         "Password changed. Your API tokens were revoked: sign in again to get "
                         "a new one (`tfp login`).")
        return answer
