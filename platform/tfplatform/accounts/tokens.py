"""API tokens: issued, listed, used and revoked by their owner; all revoked when the owner's
password changes. A key is `tfp_` and 43 random URL-safe characters; only its SHA-256 is
stored (a key this random needs no slow hash), so a copy of the database signs in as nobody.

Each issue and revocation writes an audit row; `actor` is who did it (None: the platform, as
for a workspace session's token)."""

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tfplatform.accounts.models import ApiToken, User
from tfplatform.accounts.token_cache import token_cache_clear
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record, audit_snapshot
from tfplatform.core.errors import NotFound

KEY_PREFIX = "tfp_"
SHOWN_CHARS = 12
# last_used_at is written at most this often per token: not a database write per request.
USE_RECORD_SECONDS = 60
# What the audit log keeps of a token (never its digest).
AUDITED_FIELDS = ("user", "name", "prefix", "expires_at")


def api_token_digest(*, key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_token_issue(*, user: User, name: str, days: int | None = None,
                    actor: Actor = None) -> tuple[ApiToken, str]:
    """A new token and its key, which is never stored or shown again."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    lifetime = timedelta(days=days or settings.PLATFORM.api_token_days)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=key[:SHOWN_CHARS], digest=api_token_digest(key=key),
            expires_at=timezone.now() + lifetime,
        )
        audit_record(actor=actor, action=AuditAction.TOKEN_ISSUE, target=token, before=None,
                     after=audit_snapshot(obj=token, fields=AUDITED_FIELDS))
    return token, key


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def api_token_revoke(*, user: User, token_id: int, actor: Actor = None) -> None:
    """Someone else's token is "not found", like a token that does not exist."""
    if not _revoke(tokens=ApiToken.objects.filter(user=user, pk=token_id), actor=actor):
        raise NotFound("Token not found.")


def api_tokens_revoke_all(*, user: User, actor: Actor = None) -> int:
    return _revoke(tokens=ApiToken.objects.filter(user=user), actor=actor)


def api_tokens_revoke_named(*, user_id: int, name: str, actor: Actor = None) -> int:
    return _revoke(tokens=ApiToken.objects.filter(user_id=user_id, name=name), actor=actor)


def _revoke(*, tokens: QuerySet[ApiToken], actor: Actor) -> int:
    """Deletes `tokens`, one audit row each; how many there were."""
    with transaction.atomic():
        found = list(tokens.select_for_update(of=("self",)).select_related("user"))
        for token in found:
            audit_record(actor=actor, action=AuditAction.TOKEN_REVOKE, target=token,
                         before=audit_snapshot(obj=token, fields=AUDITED_FIELDS), after=None)
        ApiToken.objects.filter(pk__in=[token.pk for token in found]).delete()
    if found:
        _cache_forget()
    return len(found)


def api_token_check(*, key: str) -> ApiToken | None:
    """The live token for this key (not expired, its user active), or None."""
    token = (ApiToken.objects.select_related("user")
             .filter(digest=api_token_digest(key=key), expires_at__gt=timezone.now()).first())
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(
            seconds=USE_RECORD_SECONDS):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def _cache_forget() -> None:
    # This process refuses a revoked token at once; other web processes within
    # PLATFORM_LOOKUP_CACHE_SECONDS.
    token_cache_clear()
