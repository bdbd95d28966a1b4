"""Reads of environments and their builds."""


from django.db.models import Count, Prefetch, QuerySet

from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import Environment, EnvironmentBuild


def environment_list() -> QuerySet[Environment]:
    """Each with `experiment_count` (an environment in use cannot be deleted) and its builds."""
    builds = EnvironmentBuild.objects.select_related("node").order_by("node__hostname", "-pk")
    # Meta.ordering is dropped from GROUP BY queries, so the annotated list orders itself.
    return (
        Environment.objects.annotate(experiment_count=Count("experiments"))
        .prefetch_related(Prefetch("builds", queryset=builds))
        .order_by("name")
    )


def environment_get(*, environment_id: int) -> Environment:
    environment = environment_list().filter(pk=environment_id).first()
    if environment is None:
        raise NotFound("Environment not found.")
    return environment


def environment_build_get(*, build_id: int) -> EnvironmentBuild:
    build = EnvironmentBuild.objects.select_related("environment", "node").filter(pk=build_id)
    if (found := build.first()) is None:
        raise NotFound("Environment build not found.")
    return found


def environment_default(*, gpu: bool) -> Environment | None:
    environments = Environment.objects.order_by("id")
    return (environments.filter(gpu_capable=True) if gpu else environments).first()
