"""Service passwords given apart from their URLs (DATABASE_PASSWORD, REDIS_PASSWORD, or as
*_FILE), so a deployment passes them as secret files while the URLs stay plain configuration:

    url_with_password(url="redis://redis:6379/0", password="s3cret", name="CELERY_BROKER_URL",
                      given_as="REDIS_PASSWORD")   # "redis://:s3cret@redis:6379/0"
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

REDIS_SCHEMES = ("redis", "rediss", "rediscache")


def url_with_password(*, url: str, password: str, name: str, given_as: str) -> str:
    """`url` with `password` in it; unchanged when no password is given. A URL that already
    holds one is refused rather than silently overridden: one of the two would be stale."""
    if not password:
        return url
    parts = urlsplit(url)
    if not parts.hostname:
        raise ImproperlyConfigured(f"{given_as} is set, but {name} ({parts.scheme}://) "
                                   "names no server to send it to.")
    if parts.password is not None:
        raise ImproperlyConfigured(f"{name} holds a password and {given_as} is set too: "
                                   "give the password one way.")
    user, _, host = parts.netloc.rpartition("@")  # the user as written, already quoted
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def redis_url_with_password(*, url: str, password: str, name: str) -> str:
    """REDIS_PASSWORD into a Redis URL; any other (`filesystem://`, `locmemcache://`) is left as
    it is, since the broker and the cache need not both be Redis."""
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        return url
    return url_with_password(url=url, password=password, name=name,
                             given_as="REDIS_PASSWORD")
