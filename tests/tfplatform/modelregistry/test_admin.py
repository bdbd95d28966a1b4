"""The admin shows model versions but cannot repoint one: a path typed there would reach the
model server without the checks the registry's services make."""

import pytest
from django.test import Client

from tests.factories import ModelVersionFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_model_versions_path_cannot_be_changed_or_added_in_the_admin() -> None:
    version = ModelVersionFactory()
    admin = Client()
    admin.force_login(UserFactory(is_staff=True, is_superuser=True))
    url = f"/admin/modelregistry/modelversion/{version.pk}/change/"
    page = admin.get(url)
    assert page.status_code == 200 and 'name="path"' not in page.content.decode()
    answer = admin.post(url, {"model": version.model_id, "version": version.version,
                              "state": "available", "path": "/etc"})
    assert answer.status_code == 403
    version.refresh_from_db()
    assert version.path != "/etc"
    assert admin.get("/admin/modelregistry/modelversion/add/").status_code == 403
