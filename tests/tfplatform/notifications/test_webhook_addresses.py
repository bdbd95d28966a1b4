"""Webhooks go only to public addresses: the URL's host is resolved and every address it has is
judged, in every spelling of a private one, unless staff allowed its range."""

import ipaddress

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.notifications.addresses import (
    WebhookAddressRefused,
    WebhookHostUnresolved,
    WebhookUrlInvalid,
    webhook_target_resolve,
)
from tfplatform.notifications.models import Subscription

REFUSED = [
    ("http://127.0.0.1/hook", "loopback"),
    ("http://127.1:8080/hook", "loopback"),
    ("http://2130706433/", "loopback"),  # 127.0.0.1 as one number
    ("http://localhost:9000/hook", "loopback"),  # a name that resolves to it
    ("http://10.1.2.3/hook", "private"),
    ("http://192.168.0.10/", "private"),
    ("http://172.16.5.5/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),  # a cloud's metadata service
    ("http://[::1]:8080/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "loopback"),  # IPv4-mapped IPv6
    ("http://[::ffff:10.0.0.1]/hook", "private"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fd00::1]/", "private"),
    ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 carrying 127.0.0.1
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://100.64.0.1/", "not a public address"),  # carrier-grade NAT
]


@pytest.mark.parametrize(("url", "reason"), REFUSED)
def test_private_loopback_and_link_local_addresses_are_refused(url: str, reason: str) -> None:
    with pytest.raises(WebhookAddressRefused, match=reason) as refused:
        webhook_target_resolve(url=url)
    assert refused.value.field == "webhook_url" and refused.value.status_code == 400


@pytest.mark.parametrize("url", [
    "ftp://example.com/hook", "file:///etc/passwd", "gopher://127.0.0.1/", "javascript:alert(1)",
    "//example.com/hook", "http://", "http://user:secret@93.184.216.34/hook",
    "http://93.184.216.34:0/", "http://93.184.216.34:99999/", "http://exa mple.com/",
    "http://93.184.216.34/\nX-Injected: 1", "http://[::1/", "https://" + "a" * 2000 + ".com/",
])
def test_what_is_no_http_url_is_refused(url: str) -> None:
    with pytest.raises(WebhookUrlInvalid):
        webhook_target_resolve(url=url)


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(WebhookHostUnresolved, match="could not be resolved"):
        webhook_target_resolve(url="https://no-such-host.invalid/hook")


def test_a_public_address_is_the_one_connected_to() -> None:
    target = webhook_target_resolve(url="https://93.184.216.34:8443/hooks?x=1")
    assert (target.address, target.host, target.port) == ("93.184.216.34", "93.184.216.34", 8443)
    assert target.host_header == "93.184.216.34:8443"
    ipv6 = webhook_target_resolve(url="http://[2606:4700:4700::1111]/")
    assert ipv6.address == "2606:4700:4700::1111" and ipv6.host_header == "[2606:4700:4700::1111]"


def test_staff_allow_a_range_and_only_that_range(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(webhook_allowed_networks=("127.0.0.1/32", "10.20.0.0/16"))
    assert webhook_target_resolve(url="http://localhost:8080/").address == "127.0.0.1"
    mapped = webhook_target_resolve(url="http://[::ffff:127.0.0.1]/").address
    assert ipaddress.ip_address(mapped) == ipaddress.ip_address("::ffff:127.0.0.1")
    assert webhook_target_resolve(url="http://10.20.3.4/").address == "10.20.3.4"
    for url in ("http://127.0.0.2/", "http://10.21.0.1/", "http://[::1]/"):
        with pytest.raises(WebhookAddressRefused):
            webhook_target_resolve(url=url)


@pytest.mark.django_db
@pytest.mark.parametrize("url", [url for url, _ in REFUSED[:10]])
def test_the_api_refuses_them_with_a_field_error(url: str) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/notifications/subscriptions/",
                         {"events": ["experiment.failed"], "webhook_url": url}, format="json")
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "webhook_address_refused" and body["webhook_url"]
    assert not Subscription.objects.exists()
