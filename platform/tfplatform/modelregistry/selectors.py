from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet

from tfplatform.accounts.models import User
from tfplatform.core.visibility import visible_to
from tfplatform.modelregistry.models import ModelVersion, RegisteredModel


def model_list(*, user: User | AnonymousUser) -> QuerySet[RegisteredModel]:
    own = visible_to(queryset=RegisteredModel.objects.all(), user=user)
    if not user.is_authenticated:
        return own
    return RegisteredModel.objects.filter(Q(pk__in=own.values("pk")) | Q(public=True))


def model_version_list(*, user: User | AnonymousUser) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.filter(model__in=model_list(user=user))
        .select_related("model", "source_experiment")
        .prefetch_related("labels")
    )
