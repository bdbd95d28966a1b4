"""How webhooks are signed (docs/user-guide/notifications.md tells receivers how to check).

Each request carries `X-TFP-Timestamp: <unix seconds>` and `X-TFP-Signature: sha256=<hex>`,
the HMAC-SHA256, under the user's secret, of `<timestamp>.<body>`. The timestamp is signed with
the body, so a receiver that refuses old timestamps (five minutes, say) cannot be replayed a
request captured earlier. A user's secret is derived from the platform's secret key and a
salt only the database holds.
"""

import base64
import hashlib
import hmac

from django.conf import settings

SIGNATURE_HEADER = "X-TFP-Signature"
TIMESTAMP_HEADER = "X-TFP-Timestamp"
EVENT_HEADER = "X-TFP-Event"
DELIVERY_HEADER = "X-TFP-Delivery"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a marker, not a secret
SHOWN_CHARS = 12


def webhook_secret_derive(*, salt: str) -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), f"notifications-webhook:{salt}".encode(),
                      hashlib.sha256).digest()
    return SECRET_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def signature_compute(*, secret: str, timestamp: int, body: bytes) -> str:
    signed = f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
