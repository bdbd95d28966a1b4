"""Single sign-on configured for a test (the provider's own address is the test's to give)."""

from collections.abc import Iterator

import pytest

from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.accounts.oidc_provider import oidc_discovery_forget
from tfplatform.config.platform_settings import PlatformSettings

ISSUER = "https://idp.example.org"
ALLOWED = "platform-users"


@pytest.fixture
def sso(platform_settings_override: PlatformSettingsOverride) -> Iterator[PlatformSettings]:
    """Signing in with the provider at ISSUER, for members of ALLOWED only, the teams named by
    groups; each test reads the provider's discovery document afresh."""
    oidc_discovery_forget()
    yield platform_settings_override(
        oidc_issuer=ISSUER, oidc_provider_name="Example IdP", oidc_client_id="platform",
        oidc_client_secret="client-secret-of-the-platform-at-the-idp",
        oidc_allowed_groups=(ALLOWED,))
    oidc_discovery_forget()
