"""The environment the platform reads its configuration from (django-environ), where any
variable NAME may be given instead as NAME_FILE: the path of a file holding its value, as Docker
and Kubernetes provide secrets. The database URL, the secret key, the admin's first password
then never appear in a process' environment or in `docker inspect`.

    env = platform_env()
    env.str("DJANGO_SECRET_KEY", default="")   # DJANGO_SECRET_KEY_FILE's contents, if set
"""

from __future__ import annotations

from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from environ.fileaware_mapping import FileAwareMapping


class _SecretFiles(FileAwareMapping):
    def __getitem__(self, key: str) -> Any:
        path = self.env.get(f"{key}_FILE")
        try:
            value = super().__getitem__(key)
        except OSError as error:
            raise ImproperlyConfigured(f"{key}_FILE names {path}, which cannot be read: "
                                       f"{error.strerror}.") from error
        # A secret file ends with the newline `echo` or an editor wrote; no value has one.
        return value.rstrip("\r\n") if path else value


class _PlatformEnv(environ.FileAwareEnv):
    ENVIRON = _SecretFiles(cache=False)


def platform_env() -> environ.Env:
    return _PlatformEnv()
