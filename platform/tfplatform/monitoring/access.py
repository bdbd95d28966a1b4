"""Who may scrape /metrics: a holder of the configured bearer token, or a client on an
internal address (PLATFORM_METRICS_ALLOWED_NETWORKS, loopback unless configured)."""

import hmac
import ipaddress
from functools import cache

from django.conf import settings
from django.http import HttpRequest

from tfplatform.core.client import client_address
from tfplatform.core.errors import Forbidden, NotFound

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _networks(spec: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in spec if item.strip())


def address_internal(*, address: str | None) -> bool:
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    networks = _networks(tuple(settings.PLATFORM["METRICS_ALLOWED_NETWORKS"]))
    return any(ip in network for network in networks)


def metrics_scrape_check(*, request: HttpRequest) -> None:
    """Returns if `request` may read the metrics; a wrong token is refused (403), anyone else
    is told there is nothing here (404)."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and presented:
        token = settings.PLATFORM["METRICS_TOKEN"]
        # Compared in constant time; an unset token matches nothing.
        if token and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return
        raise Forbidden("Invalid metrics token.")
    if address_internal(address=client_address(request)):
        return
    raise NotFound()
