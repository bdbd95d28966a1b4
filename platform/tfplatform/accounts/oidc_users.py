"""Users the OpenID provider signs in: found by their identity there (issuer and `sub`), never by
email alone; created at their first sign-in; at every sign-in given the team their groups name;
and deactivated, their API tokens revoked, once the provider's claims no longer let them in.

Claims are the provider's, but a user may edit some of theirs there (a name, an email address,
sometimes a username): each is checked for its type and length like any other input."""

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from tfplatform.accounts.models import OidcIdentity, Team, User
from tfplatform.accounts.oidc_provider import oidc_provider_name
from tfplatform.accounts.services import user_deactivate
from tfplatform.core.errors import Forbidden

SUBJECT_MAX = 255
NAME_MAX = 150
EMAIL_MAX = 254
TEAM_NAME_MAX = Team._meta.get_field("name").max_length or 100
# More groups than anyone is in: a claim this long is cut, not stored or looked up whole.
GROUPS_MAX = 1000
GROUP_MAX = 1024
# A username becomes a folder's name (a teamless user's datasets, users/<username>/): ASCII
# letters, digits and `._-` only, no `..`, whatever the claim held.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DOTS = re.compile(r"\.{2,}")


@dataclass(frozen=True)
class OidcClaims:
    subject: str
    username: str
    email: str
    first_name: str
    last_name: str
    groups: tuple[str, ...]


def oidc_claims_read(*, claims: Mapping[str, Any]) -> OidcClaims:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not 0 < len(subject) <= SUBJECT_MAX:
        raise Forbidden("The sign-in provider sent no usable subject (`sub`) for you.")
    email = _text(claims.get("email"), EMAIL_MAX)
    try:
        validate_email(email)
    except ValidationError:
        email = ""
    return OidcClaims(
        subject=subject,
        username=_text(claims.get("preferred_username"), NAME_MAX) or email.split("@")[0],
        email=email,
        first_name=_text(claims.get("given_name"), NAME_MAX),
        last_name=_text(claims.get("family_name"), NAME_MAX),
        groups=_groups(claims=claims),
    )


def oidc_user_sign_in(*, issuer: str, claims: Mapping[str, Any]) -> User:
    """The user these claims (the provider's ID token's and userinfo's) sign in, brought up to
    date with them. Raises Forbidden, with the reason, where they may not sign in: a user the
    claims no longer allow is deactivated first, and stays so."""
    read = oidc_claims_read(claims=claims)
    now = timezone.now()
    refusal = ""
    with transaction.atomic():
        identity = (OidcIdentity.objects.select_for_update().select_related("user")
                    .filter(issuer=issuer, subject=read.subject).first())
        if not _groups_allowed(groups=read.groups):
            refusal = (f"Your account at {oidc_provider_name()} is in none of the groups "
                       "allowed to use this platform.")
            if identity is not None:
                _identity_revoke(identity=identity, now=now)
        elif identity is None:
            if settings.PLATFORM.oidc_create_users:
                identity = _identity_create(issuer=issuer, claims=read)
            else:
                refusal = ("There is no account on this platform for your account at "
                           f"{oidc_provider_name()}; staff can create one.")
        elif not identity.user.is_active and identity.revoked_at is None:
            refusal = "Your account on this platform is deactivated; staff can reactivate it."
        if not refusal:
            assert identity is not None
            _user_update(user=identity.user, claims=read)
            identity.last_sign_in_at = now
            identity.revoked_at = None
            identity.save(update_fields=["last_sign_in_at", "revoked_at"])
    # Outside the transaction: the deactivation above is kept, whatever the caller does.
    if refusal:
        raise Forbidden(refusal)
    assert identity is not None
    return identity.user


def _identity_revoke(*, identity: OidcIdentity, now: datetime) -> None:
    # Marked only where the provider ended an active user: one staff deactivated stays theirs to
    # reactivate, whatever the provider says later.
    if identity.user.is_active:
        identity.revoked_at = now
        identity.save(update_fields=["revoked_at"])
    user_deactivate(user=identity.user)


def _identity_create(*, issuer: str, claims: OidcClaims) -> OidcIdentity:
    user = User(username=_username_free(claims=claims))
    user.set_unusable_password()  # signs in through the provider, never with a password here
    user.save()
    return OidcIdentity.objects.create(user=user, issuer=issuer, subject=claims.subject)


def _user_update(*, user: User, claims: OidcClaims) -> None:
    """The provider's word on the user's name, address and team; the username stays the one
    the first sign-in chose (folders and other users know it)."""
    user.email = claims.email
    user.first_name = claims.first_name
    user.last_name = claims.last_name
    user.is_active = True
    fields = ["email", "first_name", "last_name", "is_active"]
    if settings.PLATFORM.oidc_groups_claim:
        user.team = _team_of(groups=claims.groups)
        fields.append("team")
    user.save(update_fields=fields)


def _groups_allowed(*, groups: tuple[str, ...]) -> bool:
    allowed = settings.PLATFORM.oidc_allowed_groups
    return not allowed or any(group in groups for group in allowed)


def _team_of(*, groups: tuple[str, ...]) -> Team | None:
    """The first configured `group=team` pair the user's groups hold names their team (made if
    staff have not made it yet); without pairs, a group named as an existing team is one, the
    first by name where several are."""
    pairs = [pair.partition("=") for pair in settings.PLATFORM.oidc_group_teams]
    if pairs:
        for group, _, team in pairs:
            if group.strip() in groups:
                found, _ = Team.objects.get_or_create(name=team.strip())
                return found
        return None
    names = [group for group in groups if len(group) <= TEAM_NAME_MAX]
    return Team.objects.filter(name__in=names).order_by("name").first()


def _groups(*, claims: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups claim's values; one group alone may come as a string."""
    name = settings.PLATFORM.oidc_groups_claim
    value = claims.get(name) if name else None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(group for group in value[:GROUPS_MAX]
                 if isinstance(group, str) and 0 < len(group) <= GROUP_MAX)


def _text(value: Any, limit: int) -> str:
    return value.strip()[:limit] if isinstance(value, str) else ""


def _username_free(*, claims: OidcClaims) -> str:
    """The provider's preferred username made safe, or with a suffix of the subject's hash
    where it is taken: a provider's user named `admin` never becomes the local admin."""
    base = _DOTS.sub(".", _UNSAFE.sub("-", claims.username)).strip(".-")[:NAME_MAX - 17]
    base = base or "user"
    digest = hashlib.sha256(claims.subject.encode()).hexdigest()
    for candidate in (base, f"{base}-{digest[:8]}", f"{base}-{digest[:16]}"):
        if not User.objects.filter(username__iexact=candidate).exists():
            return candidate
    return f"user-{digest}"
