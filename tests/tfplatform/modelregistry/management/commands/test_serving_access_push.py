"""`manage.py serving_access_push`: the front's table by hand, and a clear error when nobody
takes it."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests import live
from tests.fixtures_settings import PlatformSettingsOverride

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_push_by_hand(model_server: dict[str, Any]) -> None:
    out = StringIO()
    call_command("serving_access_push", stdout=out)
    assert out.getvalue().strip() == "Pushed."


@pytest.mark.parametrize("refresh", [0.0, 5.0])
def test_nobody_takes_it(platform_settings_override: PlatformSettingsOverride,
                         refresh: float) -> None:
    # Off, or on with no server listening.
    platform_settings_override(tf_serving_front_refresh_seconds=refresh,
                               tf_serving_rest=f"http://127.0.0.1:{live.free_port()}")
    with pytest.raises(CommandError, match="did not take the access table"):
        call_command("serving_access_push")
