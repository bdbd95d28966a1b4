"""The account page's new-subscription form: its shape only; the notifications service judges
the rest (the webhook's address, an email address to send to, a team) for the API too."""

from django import forms

from tfplatform.notifications.events import EventKind
from tfplatform.notifications.models import URL_LENGTH, Subscription


class SubscriptionForm(forms.Form):
    events = forms.MultipleChoiceField(choices=EventKind.choices,
                                       widget=forms.CheckboxSelectMultiple)
    scope = forms.ChoiceField(choices=Subscription.Scope.choices, initial=Subscription.Scope.MINE)
    webhook_url = forms.CharField(
        max_length=URL_LENGTH, required=False, label="Webhook URL",
        widget=forms.URLInput(attrs={"placeholder": "https://hooks.example.com/tfp"}),
        help_text="Gets each event as a signed POST (http or https, a public address).")
    email = forms.BooleanField(required=False, label="Email me",
                               help_text="To your account's address.")
