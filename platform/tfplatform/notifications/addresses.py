"""Where a webhook may go: http(s) to public addresses only, or to ranges staff allowed
(PLATFORM_WEBHOOK_ALLOWED_NETWORKS). Webhooks must never become a way into the platform's own
network, so the host is resolved when a subscription is made and again at every delivery, every
address it resolves to must pass, and the delivery connects to the address that was checked
(transport.py): a name that resolves elsewhere a moment later (DNS rebinding) changes nothing.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from tfplatform.core.errors import InvalidInput
from tfplatform.notifications.models import URL_LENGTH

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_PORTS = {"http": 80, "https": 443}
FIELD = "webhook_url"
# IPv6 forms that carry an IPv4 address a gateway may forward to: 6to4 and NAT64's prefix.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class WebhookUrlInvalid(InvalidInput):
    code = "webhook_url_invalid"


class WebhookAddressRefused(InvalidInput):
    code = "webhook_address_refused"


class WebhookHostUnresolved(InvalidInput):
    code = "webhook_host_unresolved"


@dataclass(frozen=True, kw_only=True)
class WebhookTarget:
    url: str
    scheme: str
    # The name as the URL gives it (ASCII): the Host header and TLS's server name.
    host: str
    port: int
    # The checked address the delivery connects to.
    address: str

    @property
    def host_header(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if DEFAULT_PORTS[self.scheme] == self.port else f"{shown}:{self.port}"


def webhook_target_resolve(*, url: str) -> WebhookTarget:
    """The URL's target, resolved and checked; raises a field error (webhook_url) saying why
    it is refused."""
    scheme, host, port = _url_parse(url=url)
    addresses = _resolve(host=host, port=port)
    for address in addresses:
        reason = address_refusal(address=address)
        if reason:
            raise WebhookAddressRefused(
                f"The webhook's host {host} resolves to {address}, {reason}: webhooks go only "
                "to public addresses.", field=FIELD)
    return WebhookTarget(url=url, scheme=scheme, host=host, port=port, address=str(addresses[0]))


def _url_parse(*, url: str) -> tuple[str, str, int]:
    if len(url) > URL_LENGTH:
        raise WebhookUrlInvalid(f"A webhook URL has at most {URL_LENGTH} characters.",
                                field=FIELD)
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise WebhookUrlInvalid("A webhook URL holds no spaces or control characters.",
                                field=FIELD)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise WebhookUrlInvalid(f"Not a URL: {error}.", field=FIELD) from error
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise WebhookUrlInvalid("A webhook URL starts with http:// or https://.", field=FIELD)
    if parts.username is not None or parts.password is not None:
        # They would be shown in the delivery log; a receiver authenticates by the signature.
        raise WebhookUrlInvalid("A webhook URL holds no user name or password.", field=FIELD)
    if not parts.hostname:
        raise WebhookUrlInvalid("A webhook URL names a host.", field=FIELD)
    try:
        host = parts.hostname.encode("idna").decode("ascii")
    except UnicodeError as error:
        raise WebhookUrlInvalid("The webhook URL's host is not a valid name.",
                                field=FIELD) from error
    if port == 0:
        raise WebhookUrlInvalid("The webhook URL's port must be 1 to 65535.", field=FIELD)
    return scheme, host, port or DEFAULT_PORTS[scheme]


def _resolve(*, host: str, port: int) -> list[IPAddress]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as error:
        raise WebhookHostUnresolved(f"The webhook's host {host} could not be resolved.",
                                    field=FIELD) from error
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in found:
        # An IPv6 address may carry its zone ("fe80::1%eth0"); the address is what is judged.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookHostUnresolved(f"The webhook's host {host} has no address.", field=FIELD)
    return addresses


def address_refusal(*, address: IPAddress) -> str:
    """Why a webhook may not connect to `address` (empty: it may). An IPv4-mapped IPv6
    address is its IPv4 address; 6to4 and NAT64 addresses are judged on the IPv4 they carry
    too."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if _allowed(address=address):
        return ""
    carried: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.sixtofour is not None:
            carried.append(address.sixtofour)
        if address in NAT64:
            carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    for each in carried:
        if each is not address and _allowed(address=each):
            continue
        if reason := _kind_refused(address=each):
            return reason
    return ""


def _allowed(*, address: IPAddress) -> bool:
    return any(address in ipaddress.ip_network(network, strict=False)
               for network in settings.PLATFORM.webhook_allowed_networks)


def _kind_refused(*, address: IPAddress) -> str:
    # The most telling name first: 127.0.0.1 is private too, but "loopback" says more.
    for test, name in (("is_unspecified", "an unspecified address"),
                       ("is_loopback", "a loopback address"),
                       ("is_link_local", "a link-local address"),
                       ("is_multicast", "a multicast address"),
                       ("is_reserved", "a reserved address"),
                       ("is_private", "a private address")):
        if getattr(address, test):
            return name
    if not address.is_global:
        return "not a public address"
    return ""
