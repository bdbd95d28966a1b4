"""Your account's notifications: subscriptions (add, remove), the webhook secret (rotate, shown
once) and the latest delivery attempts."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from tfplatform.accounts.models import User
from tfplatform.core.errors import NotFound, PlatformError
from tfplatform.notifications import selectors, services
from tfplatform.web.notification_forms import SubscriptionForm

FORM_FIELDS = ("events", "scope", "webhook_url", "email")


@never_cache  # it may show a new secret once
@login_required
def notification_page(request: HttpRequest) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    form = SubscriptionForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            _, secret = services.subscription_create(
                owner=user, request=services.SubscriptionRequest(**form.cleaned_data))
        except PlatformError as error:
            form.add_error(error.field if error.field in FORM_FIELDS else None, error.message)
        else:
            messages.success(request, "Subscribed.")
            if secret is None:
                return redirect("account-notifications")
            form = SubscriptionForm()
    return _page(request, user=user, form=form, issued=secret)


@never_cache
@login_required
@require_POST
def notification_secret_rotate_action(request: HttpRequest) -> HttpResponse:
    user: User = request.user  # type: ignore[assignment]
    issued = services.webhook_secret_rotate(user=user)
    messages.success(request, "A new webhook secret signs your webhooks from now on.")
    return _page(request, user=user, form=SubscriptionForm(), issued=issued)


def _page(request: HttpRequest, *, user: User, form: SubscriptionForm,
          issued: str | None) -> HttpResponse:
    return render(request, "account/notifications.html", {
        "form": form, "issued": issued,
        "subscriptions": selectors.subscription_list(user=user),
        "secret": selectors.webhook_secret_get(user=user),
        "attempts": selectors.attempt_log(user=user),
    })


@login_required
@require_POST
def notification_subscription_delete_action(request: HttpRequest,
                                            subscription_id: int) -> HttpResponse:
    subscription = selectors.subscription_get(user=request.user,
                                              subscription_id=subscription_id)
    if subscription.owner_id != request.user.pk:  # staff remove others' in the admin
        raise NotFound("Subscription not found.")
    services.subscription_delete(subscription=subscription, actor=request.user)
    messages.success(request, "Subscription removed.")
    return redirect("account-notifications")
