"""Existing plain-text tokens (DRF's authtoken table) become hashed API tokens: clients keep
working with the key they hold, and the database no longer holds a key that signs in."""

import hashlib
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import migrations
from django.utils import timezone


def plain_keys_hash(apps: Any, schema_editor: Any) -> None:
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("accounts", "ApiToken")
    expires = timezone.now() + timedelta(days=settings.PLATFORM.api_token_days)
    for token in Token.objects.all():
        ApiToken.objects.create(
            user_id=token.user_id, name="from before hashed tokens", prefix=token.key[:8],
            digest=hashlib.sha256(token.key.encode()).hexdigest(), expires_at=expires,
        )
    Token.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_api_tokens"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(plain_keys_hash, migrations.RunPython.noop)]
