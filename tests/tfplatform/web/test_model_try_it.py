"""The model page's "try it" endpoint: session users only, CSRF-checked, others see nothing.

Answers from a trained, deployed model are covered end to end in test_e2e.py.
"""

import json

import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.modelregistry.models import RegisteredModel

pytestmark = pytest.mark.django_db

BODY = json.dumps({"instances": [[1.0, 2.0]]})


def session(user: object) -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get("/experiments/")  # sets the CSRF cookie, as the page load does
    return client, client.cookies["csrftoken"].value


def test_a_stranger_cannot_tell_a_private_model_from_a_missing_one() -> None:
    model = RegisteredModel.objects.create(name="private-digits", owner=UserFactory())
    client, token = session(UserFactory())
    answers = [
        client.post(
            f"/models/{name}/predict/",
            BODY,
            content_type="application/json",
            HTTP_X_CSRFTOKEN=token,
        )
        for name in (model.name, "no-such-model")
    ]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].json()["error"] == answers[1].json()["error"].replace(
        "no-such-model", model.name
    )


def test_the_page_endpoint_checks_csrf_and_the_body_size(settings: object,
    platform_settings_override: PlatformSettingsOverride) -> None:
    owner = UserFactory()
    model = RegisteredModel.objects.create(name="mine", owner=owner)
    client, token = session(owner)
    url = f"/models/{model.name}/predict/"
    assert client.post(url, BODY, content_type="application/json").status_code == 403
    platform_settings_override(max_predict_bytes=10)  # type: ignore[attr-defined]
    too_big = client.post(url, BODY, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert too_big.status_code == 413 and "larger than 10 bytes" in too_big.json()["error"]
    assert client.get(url).status_code == 405
    assert Client().post(url, BODY, content_type="application/json").status_code == 302
