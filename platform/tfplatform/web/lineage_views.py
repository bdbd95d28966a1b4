"""The Reproduce action of an experiment's page (its lineage card is the page's own)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from tfplatform.experiments.selectors.experiments import experiment_get
from tfplatform.experiments.services.reproduction import experiment_reproduce


@login_required
@require_POST
def experiment_reproduce_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    reproduction = experiment_reproduce(
        user=request.user,  # type: ignore[arg-type]
        experiment=experiment, allow_changes=request.POST.get("allow_changes") == "on")
    created = reproduction.experiment
    messages.success(request, f"Reproducing #{experiment.pk} as #{created.pk}; pinned: "
                     f"{'; '.join(reproduction.pinned)}.")
    for text in (*(f"Differs: {change}." for change in reproduction.changes),
                 *(f"{note[0].upper()}{note[1:]}." for note in reproduction.notes)):
        messages.warning(request, text)
    return redirect("experiment-detail", experiment_id=created.pk)
