"""What the model server's front needs to take platform tokens (serving/front.py): every live
token's digest with its user, and every model's owner, team, visibility and routes."""

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from serving.front import AccessTable, Caller, ModelAccess
from serving.routes import ModelRoute
from tfplatform.accounts.models import ApiToken
from tfplatform.core.throttling import ScopedWindowRateThrottle
from tfplatform.modelregistry.models import ModelLabel, RegisteredModel

INFERENCE_SCOPE = "inference"  # the web app's throttle scope for TF Serving's calls


def serving_access_table() -> AccessTable:
    """Three queries, whatever the number of tokens and models."""
    callers = {
        digest: Caller(user=user, team=team, staff=staff, expires_at=expires.timestamp())
        for digest, user, team, staff, expires in ApiToken.objects.filter(
            expires_at__gt=timezone.now(), user__is_active=True,
        ).values_list("digest", "user_id", "user__team_id", "user__is_staff", "expires_at")
    }
    labels: defaultdict[str, dict[str, int]] = defaultdict(dict)
    for name, label, version in ModelLabel.objects.values_list(
            "model__name", "label", "version__version"):
        labels[name][label] = version
    models = {
        name: ModelAccess(
            route=ModelRoute(name=name, canary_percent=canary, labels=labels[name]),
            owner=owner, team=team, public=public,
        )
        for name, owner, team, public, canary in RegisteredModel.objects.values_list(
            "name", "owner_id", "team_id", "public", "canary_percent")
    }
    limit, seconds = _inference_rate()
    return AccessTable(callers=callers, models=models, rate_limit=limit,
                       rate_seconds=float(seconds or 60))


def _inference_rate() -> tuple[int | None, int | None]:
    rate = settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES", {}).get(INFERENCE_SCOPE)
    return ScopedWindowRateThrottle().parse_rate(rate)


@dataclass(frozen=True)
class ServingEndpoints:
    """Where TF Serving's own clients call models directly with a platform token; None where
    the model server takes none (stock TF Serving: calls go through the web app)."""

    grpc: str | None
    rest: str | None


def serving_front_on() -> bool:
    """Whether users' platform tokens are taken by the model server's front: the embedded
    server's own, or the gateway's in front of stock TF Serving; a refresh interval of 0 turns
    it off (calls then go through the web app alone)."""
    return settings.PLATFORM.tf_serving_front_refresh_seconds > 0


def serving_endpoints() -> ServingEndpoints:
    if not serving_front_on():
        return ServingEndpoints(grpc=None, rest=None)
    config = settings.PLATFORM
    return ServingEndpoints(
        grpc=config.tf_serving_public_grpc or config.tf_serving_front_grpc
        or config.tf_serving_grpc,
        rest=config.tf_serving_public_rest or config.tf_serving_front_rest
        or config.tf_serving_rest)
