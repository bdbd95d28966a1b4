"""The experiments list's search form, its bulk actions, and an experiment's tags and note."""

import re
from typing import cast, get_args
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.search_api import ExperimentSearchQuerySerializer
from tfplatform.experiments.selectors.experiments import experiment_get
from tfplatform.experiments.selectors.progress import ACTIVE_STATES
from tfplatform.experiments.selectors.search import (
    ExperimentQuery,
    experiment_search_with_progress,
    experiment_tag_counts,
)
from tfplatform.experiments.services.annotations import (
    BulkAction,
    experiment_annotate,
    experiments_bulk_change,
)
from tfplatform.web.annotation_forms import (
    annotation_changes,
    annotation_saved_message,
    tags_split,
)

LIST_ROWS = 200


# The form's text fields as the API's parameters; lists are written space- or comma-separated.
SINGLE = ("q", "owner", "team", "dataset", "environment", "model", "archived", "ordering")


SPLIT = {"state": r"[\s,]+", "tag": r"[\s,]+", "hp": r"\s+", "final": r"\s+", "best": r"\s+"}


SORTS = [("", "Newest first"), ("created_at", "Oldest first"), ("name", "Name"),
         ("-best.val_accuracy", "Best val_accuracy"), ("best.val_loss", "Best val_loss"),
         ("-final.val_accuracy", "Final val_accuracy"), ("final.val_loss", "Final val_loss")]


@login_required
@require_GET
def experiment_list_page(request: HttpRequest) -> HttpResponse:
    params = _api_params(form=request.GET)
    serializer = ExperimentSearchQuerySerializer(data=params)
    errors: list[str] = []
    if serializer.is_valid():
        query = serializer.query()
    else:
        errors = [f"{field}: {' '.join(map(str, problems))}"
                  for field, problems in serializer.errors.items()]
        query = ExperimentQuery()
    experiments = experiment_search_with_progress(user=request.user, query=query)
    rows = list(experiments[:LIST_ROWS])
    context = {
        "experiments": rows,
        "total": experiments.count() if len(rows) == LIST_ROWS else len(rows),
        "form": {name: request.GET.get(name, "") for name in (*SINGLE, *SPLIT)},
        "states": Experiment.State.values,
        "sorts": SORTS,
        "searching": any(request.GET.get(name) for name in (*SINGLE, *SPLIT)),
        "errors": errors,
        "tag_counts": list(experiment_tag_counts(user=request.user)[:30]),
        "any_active": any(e.state in ACTIVE_STATES for e in rows),
        "query_string": request.GET.urlencode(),
    }
    # htmx refreshes only the rows while something is queued or running.
    template = "experiments/_rows.html" if request.headers.get("HX-Request") else None
    return render(request, template or "experiments/list.html", context)


@login_required
@require_POST
def experiment_bulk_action(request: HttpRequest) -> HttpResponse:
    """The list's buttons on the ticked rows: compare them, or tag, untag, archive, unarchive."""
    back = _list_url(query=request.POST.get("query", ""))
    ids = [int(i) for i in request.POST.getlist("ids") if i.isascii() and i.isdigit()
           and len(i) < 19]
    action = request.POST.get("action", "")
    if not ids:
        messages.error(request, "Tick one or more experiments first.")
        return redirect(back)
    if action == "compare":
        return redirect(f"{reverse('experiment-compare')}?{urlencode([('ids', i) for i in ids])}")
    if action not in get_args(BulkAction):
        raise InvalidInput("Unknown action.", field="action")
    tags = tags_split(text=request.POST.get("tags", "")) if action in ("tag", "untag") else []
    changed = experiments_bulk_change(user=request.user, ids=ids,
                                      action=cast(BulkAction, action), tags=tags)
    messages.success(request, f"{action.capitalize()}: {changed} experiment"
                              f"{'s' if changed != 1 else ''}.")
    return redirect(back)


@login_required
@require_POST
def experiment_annotate_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    changes = annotation_changes(form=request.POST)
    experiment_annotate(experiment=experiment, **changes)
    messages.success(request, annotation_saved_message(changes=changes))
    return redirect("experiment-detail", experiment_id=experiment.pk)


def _api_params(*, form: QueryDict) -> QueryDict:
    params = QueryDict(mutable=True)
    for name in SINGLE:
        value = form.get(name, "").strip()
        if value:
            params[name] = value
    for name, separator in SPLIT.items():
        for raw in form.getlist(name):
            for item in re.split(separator, raw.strip()):
                if item:
                    params.appendlist(name, item)
    return params


def _list_url(*, query: str) -> str:
    # Only the list's own query string goes back into the redirect: never another address.
    given = QueryDict(query)
    pairs = [(k, v) for k in given for v in given.getlist(k) if k in (*SINGLE, *SPLIT)]
    return reverse("experiment-list") + (f"?{urlencode(pairs)}" if pairs else "")
