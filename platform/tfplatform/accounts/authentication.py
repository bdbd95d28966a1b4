"""API token authentication (`Authorization: Token <key>`) that remembers a checked token for a
moment.

Inference clients send a request every few milliseconds, and looking the token and its user up
was a third of the platform's own time per prediction (bench/inference.py). A token revoked or
expired, or a user deactivated, is refused within PLATFORM.lookup_cache_seconds (at once in
the process that revoked it).
"""

from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.token_cache import token_cache_get, token_cache_put
from tfplatform.accounts.tokens import api_token_check, api_token_digest


class CachedTokenAuthentication(TokenAuthentication):
    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        digest = api_token_digest(key=key)
        found = token_cache_get(digest=digest)
        if found is None or found[1].expires_at <= timezone.now():
            token = api_token_check(key=key)
            if token is None:
                raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
            found = (token.user, token)
            token_cache_put(digest=digest, found=found)
        user, token = found
        # Each request gets its own user object: views may annotate it. __getstate__ is the copy
        # copy.copy makes (own _state, own field cache) without pickle's protocol around it.
        clone = user.__class__.__new__(user.__class__)
        clone.__dict__.update(user.__getstate__())
        return clone, token
