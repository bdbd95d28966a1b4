"""The model server's front for platform users: their own API tokens, checked in the server.

Inference used to pass through the web app (token lookup, throttle, route, a second HTTP hop);
now a user's TF Serving client talks to the model server directly with their platform token.
The server holds no database credentials: the platform pushes it an access table (the SHA-256
of each live token with its user, team and expiry; each model's owner, team, visibility,
labels and canary share; the inference rate) when one changes and again every few seconds. A
table older than its maximum age is not trusted: users get UNAVAILABLE until the next push, so
a revoked token never outlives the refresh interval by more than that age.

The rules are the web app's: a model is visible to its owner, their team, staff, and to
everyone when public; others get TF Serving's own "not found"; versions are chosen by
serving.routes as the web app chooses them. Standard library only, but for grpc's codes.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serving.errors import Code, ServingError
from serving.routes import ModelRoute, route_choose

# Not TF Serving's: where the platform PUTs the access table (with the server's own token).
ACCESS_PATH = "/platform/access"
SCHEMES = ("bearer", "token")  # TF Serving clients send Bearer; the platform's API says Token
NO_TOKEN = "Send your platform API token: authorization: Bearer <token>."  # noqa: S105
BAD_TOKEN = "Invalid, expired or revoked token."  # noqa: S105 - a message
STALE = "The model server's access table is out of date; try again in a few seconds."
THROTTLED = "Request was throttled."


@dataclass(frozen=True)
class Caller:
    user: int
    team: int | None
    staff: bool
    expires_at: float  # seconds since the epoch


@dataclass(frozen=True)
class ModelAccess:
    route: ModelRoute
    owner: int
    team: int | None
    public: bool

    def visible_to(self, caller: Caller) -> bool:
        return (caller.staff or self.public or caller.user == self.owner
                or (self.team is not None and caller.team == self.team))


@dataclass(frozen=True)
class AccessTable:
    callers: Mapping[str, Caller]  # by the SHA-256 (hex) of the token's key
    models: Mapping[str, ModelAccess]
    rate_limit: int | None = None  # requests per user per window; None: no limit
    rate_seconds: float = 60.0


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def access_table_to_wire(table: AccessTable) -> dict[str, Any]:
    """The push's JSON body (one definition of the format, for both ends)."""
    return {
        "callers": {digest: [c.user, c.team, c.staff, c.expires_at]
                    for digest, c in table.callers.items()},
        "models": {name: [m.owner, m.team, m.public, m.route.canary_percent,
                          dict(m.route.labels)] for name, m in table.models.items()},
        "rate": [table.rate_limit, table.rate_seconds],
    }


def access_table_from_wire(data: Any) -> AccessTable:
    """The table a push carries; ValueError when it is not one."""
    try:
        callers = {str(digest): Caller(user=int(user), team=_id(team), staff=bool(staff),
                                       expires_at=float(expires))
                   for digest, (user, team, staff, expires) in data["callers"].items()}
        models = {str(name): ModelAccess(
            route=ModelRoute(name=str(name), canary_percent=int(canary),
                             labels={str(k): int(v) for k, v in labels.items()}),
            owner=int(owner), team=_id(team), public=bool(public))
            for name, (owner, team, public, canary, labels) in data["models"].items()}
        limit, seconds = data["rate"]
        return AccessTable(callers=callers, models=models,
                           rate_limit=None if limit is None else int(limit),
                           rate_seconds=float(seconds))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"not an access table: {error!r}") from error


def _id(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class Routed:
    """Served by `version` when set, else by `label` when set, else as the server decides;
    `label` also says which label chose the version (answered as X-Model-Label)."""

    version: int | None
    label: str | None


class Front:
    """Thread-safe: the REST loop and the gRPC threads decide while a push replaces the table."""

    def __init__(self, *, max_age_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max_age = max_age_seconds
        self._clock = clock
        self._table: AccessTable | None = None
        self._received = 0.0
        self._lock = threading.Lock()
        self._window = -1
        self._counts: dict[int, int] = {}

    def table_set(self, table: AccessTable) -> None:
        with self._lock:
            self._table, self._received = table, self._clock()

    def caller(self, presented: str | None) -> Caller:
        """The caller an `authorization` value names; ServingError when none may call."""
        table = self._table
        if table is None or self._clock() - self._received > self._max_age:
            raise ServingError(Code.UNAVAILABLE, STALE)
        scheme, _, key = (presented or "").strip().partition(" ")
        if scheme.lower() not in SCHEMES or not key.strip():
            raise ServingError(Code.UNAUTHENTICATED, NO_TOKEN)
        found = table.callers.get(token_digest(key.strip()))
        if found is None or found.expires_at <= time.time():
            raise ServingError(Code.UNAUTHENTICATED, BAD_TOKEN)
        return found

    def route(self, *, caller: Caller, name: str, call: str, version: int | None,
              label: str | None, roll: float | None = None, throttle: bool = True) -> Routed:
        """The version (or label) to serve `caller`'s call with, as the web app would pick it:
        throttled first, then NOT_FOUND for a model they may not see (TF Serving's words for a
        model it lacks, so names reveal nothing)."""
        table = self._table
        assert table is not None  # caller() checked it
        if throttle:
            self._throttle(caller=caller, table=table)
        model = table.models.get(name)
        if model is None or not model.visible_to(caller):
            raise ServingError(Code.NOT_FOUND, f"Servable not found for request: Latest({name})")
        chosen, chosen_label = route_choose(route=model.route, call=call, version=version,
                                            label=label, roll=roll)
        return Routed(version=chosen, label=chosen_label)

    def _throttle(self, *, caller: Caller, table: AccessTable) -> None:
        # The web app's ScopedWindowRateThrottle: a count per user per fixed window.
        if table.rate_limit is None:
            return
        window = int(self._clock() // table.rate_seconds)
        with self._lock:
            if window != self._window:
                self._window, self._counts = window, {}
            count = self._counts[caller.user] = self._counts.get(caller.user, 0) + 1
        if count > table.rate_limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, THROTTLED)
