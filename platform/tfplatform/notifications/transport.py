"""One webhook request: to the address that was checked (addresses.py), under short timeouts,
no redirects followed, no proxy from the environment, the answer's body never read."""

from typing import Any

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter

from tfplatform.notifications.addresses import WebhookTarget

USER_AGENT = "TF-Platform-Webhooks/1"


class PinnedAddressAdapter(HTTPAdapter):
    """Connects to the target's checked address whatever its name resolves to now; the name
    still goes in the Host header, and TLS is verified against it (its server name)."""

    def __init__(self, *, target: WebhookTarget) -> None:
        self.target = target
        super().__init__(pool_connections=1, pool_maxsize=1, max_retries=0)

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> tuple[Any, Any]:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert)
        pinned: dict[str, Any] = {**host_params, "host": self.target.address,
                                  "port": self.target.port}
        tls: dict[str, Any] = dict(pool_kwargs)
        if pinned["scheme"] == "https":
            tls["server_hostname"] = self.target.host
        return pinned, tls


def webhook_post(*, target: WebhookTarget, body: bytes, headers: dict[str, str]) -> int:
    """The receiver's HTTP status; raises requests' errors (timeouts, refused, TLS)."""
    with requests.Session() as session:
        # A proxy from the environment would connect to the name, not the checked address.
        session.trust_env = False
        adapter = PinnedAddressAdapter(target=target)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        response = session.post(
            target.url, data=body, allow_redirects=False, stream=True,
            headers={**headers, "Host": target.host_header, "User-Agent": USER_AGENT,
                     "Content-Type": "application/json"},
            timeout=(settings.PLATFORM.webhook_connect_timeout_seconds,
                     settings.PLATFORM.webhook_read_timeout_seconds),
            verify=settings.PLATFORM.webhook_ca_bundle or True,
        )
        # Only its status counts: whatever the body holds, and however slowly, is not waited for.
        response.close()
        return response.status_code
