from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from tfplatform.accounts.models import User
from tfplatform.core.errors import NotFound
from tfplatform.core.visibility import visible_to
from tfplatform.experiments.models import Environment, Experiment, Metric, Trial


def experiment_list(*, user: User | AnonymousUser) -> QuerySet[Experiment]:
    return visible_to(queryset=Experiment.objects.all(), user=user).select_related(
        "owner", "environment"
    )


def experiment_get(*, user: User | AnonymousUser, experiment_id: int) -> Experiment:
    # Someone else's experiment is "not found", never "forbidden": ids reveal nothing.
    experiment = experiment_list(user=user).filter(pk=experiment_id).first()
    if experiment is None:
        raise NotFound("Experiment not found.")
    return experiment


def experiment_metrics(*, experiment: Experiment, name: str | None = None) -> QuerySet[Metric]:
    metrics = Metric.objects.filter(trial__experiment=experiment).select_related("trial")
    if name:
        metrics = metrics.filter(name=name)
    return metrics.order_by("recorded_at", "id")


def experiment_trials(*, experiment: Experiment) -> QuerySet[Trial]:
    return experiment.trials.order_by("restart_count")


def experiment_logs(*, experiment: Experiment, tail_lines: int | None = None) -> str:
    parts = []
    for trial in experiment_trials(experiment=experiment):
        if trial.logs:
            parts.append(f"--- trial {trial.restart_count} ---\n{trial.logs}")
    text = "\n".join(parts)
    if tail_lines is not None:
        text = "\n".join(text.splitlines()[-tail_lines:])
    return text


def environment_list() -> QuerySet[Environment]:
    return Environment.objects.all()


def environment_default(*, gpu: bool) -> Environment | None:
    environments = Environment.objects.order_by("id")
    return (environments.filter(gpu_capable=True) if gpu else environments).first()
