"""Users signed in by the OpenID provider (accounts/oidc_users.py): found by subject, never by
email; teams from the groups claim at every sign-in; deactivated, tokens revoked, once the
claims no longer let them in; hostile claims cut down to safe values."""

import hashlib
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.accounts.conftest import ALLOWED, ISSUER
from tfplatform.accounts.models import ApiToken, OidcIdentity, Team, User
from tfplatform.accounts.oidc_users import oidc_user_sign_in
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.audit.models import AuditEntry
from tfplatform.config.platform_settings import PlatformSettings
from tfplatform.core.errors import Forbidden

pytestmark = pytest.mark.django_db


def sign_in(*, sub: str = "u-1", groups: Any = (ALLOWED, "vision"), issuer: str = ISSUER,
            **claims: Any) -> User:
    return oidc_user_sign_in(issuer=issuer, claims={
        "sub": sub, "preferred_username": "alice", "email": "alice@example.org",
        "given_name": "Alice", "groups": list(groups) if isinstance(groups, tuple) else groups,
        **claims})


def test_a_first_sign_in_makes_the_user_in_the_team_a_group_names(sso: PlatformSettings) -> None:
    vision = TeamFactory(name="vision")
    user = sign_in()
    assert (user.username, user.email, user.first_name, user.team) == (
        "alice", "alice@example.org", "Alice", vision)
    assert user.is_active and not user.has_usable_password()  # no password sign-in here
    identity = OidcIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (ISSUER, "u-1")
    assert identity.last_sign_in_at is not None


def test_users_are_their_subject_never_their_email(sso: PlatformSettings) -> None:
    local = UserFactory(username="alice", email="alice@example.org")
    first = sign_in(sub="u-1")
    reused = sign_in(sub="u-2")  # the same address, given to someone else since
    elsewhere = sign_in(sub="u-1", issuer="https://other-idp.example.org")
    assert len({local.pk, first.pk, reused.pk, elsewhere.pk}) == 4
    # The local `alice` keeps her name; the provider's get one suffixed with their subject's hash.
    assert first.username == "alice-" + hashlib.sha256(b"u-1").hexdigest()[:8]
    again = sign_in(sub="u-1", email="alice@new.example.org", preferred_username="renamed")
    assert again.pk == first.pk
    assert (again.email, again.username) == ("alice@new.example.org", first.username)


def test_the_groups_claim_moves_the_team_at_every_sign_in(sso: PlatformSettings) -> None:
    vision, nlp = TeamFactory(name="vision"), TeamFactory(name="nlp")
    assert sign_in(groups=(ALLOWED, "vision")).team == vision
    assert sign_in(groups=(ALLOWED, "nlp")).team == nlp
    assert sign_in(groups=(ALLOWED, "vision", "nlp")).team == nlp  # the first by name
    assert sign_in(groups=(ALLOWED, "no-such-team")).team is None
    assert not Team.objects.filter(name="no-such-team").exists()  # only staff make teams here


def test_group_team_pairs_pick_the_first_pair_and_make_its_team(
    sso: PlatformSettings, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(oidc_group_teams=("ml-vision=Vision", " ml-all = Research"))
    TeamFactory(name="vision")
    assert sign_in(groups=(ALLOWED, "ml-all", "ml-vision")).team.name == "Vision"
    assert sign_in(groups=(ALLOWED, "ml-all")).team.name == "Research"
    # With pairs, a group named like a team is no longer one.
    assert sign_in(groups=(ALLOWED, "vision")).team is None


def test_without_a_groups_claim_staff_set_the_team(
    sso: PlatformSettings, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(oidc_groups_claim="", oidc_allowed_groups=())
    user = sign_in(groups=())
    user.team = TeamFactory(name="set-by-staff")
    user.save()
    assert sign_in(groups=("vision",)).team.name == "set-by-staff"


def test_a_user_out_of_the_allowed_groups_is_deactivated_and_their_token_stops(
    sso: PlatformSettings, api_client: APIClient
) -> None:
    user = sign_in()
    _, key = api_token_issue(user=user, name="ci")
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api_client.get("/api/v1/experiments/").status_code == 200  # checked, and cached
    with pytest.raises(Forbidden, match="none of the groups allowed"):
        sign_in(groups=("vision",))
    user.refresh_from_db()
    assert not user.is_active
    assert not ApiToken.objects.filter(user=user).exists()
    assert api_client.get("/api/v1/experiments/").status_code == 401
    # The platform did it, on the provider's word: one row each, with no actor.
    assert list(AuditEntry.objects.filter(object_id=str(user.pk), action="user.deactivate")
                .values_list("actor_id", flat=True)) == [None]
    # Back in the group, back in: the same account, and no token comes back with it.
    again = sign_in()
    assert again.pk == user.pk and again.is_active
    assert not ApiToken.objects.filter(user=user).exists()
    assert OidcIdentity.objects.get(user=user).revoked_at is None


def test_no_account_is_made_for_someone_outside_the_allowed_groups(sso: PlatformSettings) -> None:
    with pytest.raises(Forbidden):
        sign_in(groups=("vision",))
    assert not OidcIdentity.objects.exists()
    assert not User.objects.exists()


def test_a_user_staff_deactivated_stays_deactivated(sso: PlatformSettings) -> None:
    user = sign_in()
    user.is_active = False
    user.save()
    with pytest.raises(Forbidden, match="deactivated"):
        sign_in()
    # Not even once the provider has taken them out of the group and put them back.
    with pytest.raises(Forbidden, match="none of the groups"):
        sign_in(groups=())
    with pytest.raises(Forbidden, match="deactivated"):
        sign_in()
    user.refresh_from_db()
    assert not user.is_active


def test_without_user_creation_only_linked_accounts_sign_in(
    sso: PlatformSettings, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(oidc_create_users=False)
    with pytest.raises(Forbidden, match="no account"):
        sign_in()
    local = UserFactory(username="alice.smith")
    OidcIdentity.objects.create(user=local, issuer=ISSUER, subject="u-1")
    assert sign_in().pk == local.pk
    assert User.objects.count() == 1


@pytest.mark.parametrize("sub", [None, "", 42, "s" * 256, ["u-1"]])
def test_a_missing_or_malformed_subject_is_refused(sso: PlatformSettings, sub: Any) -> None:
    with pytest.raises(Forbidden, match="subject"):
        sign_in(sub=sub)
    assert not User.objects.exists()


@pytest.mark.parametrize(("preferred", "expected"), [
    ("../../etc/passwd", "etc-passwd"),
    ("..", "user"),
    ("ådmin <script>", "dmin-script"),
    ("x" * 10_000, "x" * 133),
    (None, "alice"),  # the email address's local part
])
def test_usernames_from_claims_are_safe_folder_names(
    sso: PlatformSettings, preferred: Any, expected: str
) -> None:
    user = sign_in(preferred_username=preferred)
    assert user.username == expected


def test_hostile_claims_are_cut_to_safe_values(sso: PlatformSettings) -> None:
    UserFactory(username="admin", is_staff=True)
    user = sign_in(preferred_username="admin", email="not an address", given_name="n" * 10_000,
                   family_name={"a": 1})
    assert user.username.startswith("admin-") and not user.is_staff
    assert (user.email, len(user.first_name), user.last_name) == ("", 150, "")


@pytest.mark.parametrize(("groups", "allowed"), [
    (ALLOWED, True),  # one group, sent as a string
    ({"platform-users": True}, False),
    ([[ALLOWED], 7, None, "x" * 5000], False),
    (["g"] * 5000 + [ALLOWED], False),  # beyond the first thousand is not read
])
def test_malformed_groups_claims(sso: PlatformSettings, groups: Any, allowed: bool) -> None:
    if allowed:
        assert sign_in(groups=groups).is_active
    else:
        with pytest.raises(Forbidden):
            sign_in(groups=groups)
