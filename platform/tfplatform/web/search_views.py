"""Hyperparameter search pages: list, launch form, detail with its live trials table and chart,
and the search's actions (cancel, deploy its best trial)."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from tfplatform.core.errors import PlatformError
from tfplatform.experiments.selectors.progress import ACTIVE_STATES
from tfplatform.searches import selectors, services
from tfplatform.searches.api import search_detail_data
from tfplatform.searches.models import Search
from tfplatform.web.annotation_forms import (
    annotation_changes,
    annotation_saved_message,
    tags_split,
)
from tfplatform.web.search_forms import BaseSpaceFormSet, SearchForm, space_formset


@login_required
@require_GET
def search_list_page(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "")
    form = {name: request.GET.get(name, "").strip() for name in ("q", "tag", "archived")}
    query = selectors.SearchQuery(
        text=form["q"][:200], tags=tuple(tags_split(text=form["tag"])),
        archived={"true": True, "any": None}.get(form["archived"], False),
        states=(state,) if state in Search.State.values else ())
    searches = selectors.search_list_with_progress(user=request.user, query=query)
    return render(request, "searches/list.html", {"searches": list(searches[:200]),
                                                  "state": state, "form": form})


@login_required
@require_POST
def search_annotate_action(request: HttpRequest, search_id: int) -> HttpResponse:
    search = selectors.search_get(user=request.user, search_id=search_id)
    changes = annotation_changes(form=request.POST)
    services.search_annotate(search=search, **changes)
    messages.success(request, annotation_saved_message(changes=changes))
    return redirect("search-detail", search_id=search.pk)


@login_required
def search_new_page(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.POST or None)
    space = space_formset(request.POST or None)
    # Both checked, so one answer shows every field's error.
    if request.method == "POST" and all([form.is_valid(), space.is_valid()]):
        try:
            search = services.search_create(
                owner=request.user,  # type: ignore[arg-type]
                request=services.SearchRequest(**form.request_kwargs(space=space.space())),
            )
        except PlatformError as error:
            _error_place(error=error, form=form, space=space)
        else:
            return redirect("search-detail", search_id=search.pk)
    return render(request, "searches/new.html", {"form": form, "space": space})


def _error_place(*, error: PlatformError, form: SearchForm, space: BaseSpaceFormSet) -> None:
    """A business error lands on the field (or the space's row) it concerns."""
    if error.field == "space":
        space.service_error(message=error.message)
    elif error.field in form.fields:
        form.add_error(error.field, error.message)
    else:
        form.add_error(None, error.message)


@login_required
@require_GET
def search_detail_page(request: HttpRequest, search_id: int) -> HttpResponse:
    search = selectors.search_get(user=request.user, search_id=search_id)
    return render(request, "searches/detail.html", _live_context(search=search))


@login_required
@require_GET
def search_live_fragment(request: HttpRequest, search_id: int) -> HttpResponse:
    """The detail page's changing parts (status, trials, the chart's points), polled by htmx
    while the search or any of its trials is active."""
    search = selectors.search_get(user=request.user, search_id=search_id)
    return render(request, "searches/_live.html", _live_context(search=search))


def _live_context(*, search: Search) -> dict[str, Any]:
    data = search_detail_data(search=search)
    names = sorted(search.space)
    trials = [{**trial, "cells": [_cell(trial["params"].get(name)) for name in names],
               "best": trial["index"] == data["best_trial"],
               "url": reverse("experiment-detail", args=[trial["experiment"]])}
              for trial in data["trials"]]
    best = next((trial for trial in trials if trial["best"]), None)
    return {
        "search": search,
        "tags": data["tags"],
        "note_html": data["note_html"],
        "names": names,
        "trials": trials,
        "best": best,
        "space": [(name, _range_text(search.space[name])) for name in names],
        "trials_ended": sum(1 for trial in trials if trial["outcome"]),
        "active": search.state == Search.State.RUNNING
        or any(trial["state"] in ACTIVE_STATES for trial in trials),
        "chart": {
            "metric": search.metric,
            "dimensions": [{"name": name, **search.space[name]} for name in names],
            "points": [{"trial": trial["index"], "params": trial["params"],
                        "value": trial["best_value"], "best": trial["best"],
                        "url": trial["url"]} for trial in trials],
        },
    }


def _range_text(entry: dict[str, Any]) -> str:
    if "values" in entry:
        return ", ".join(_cell(value) for value in entry["values"])
    text = f"{entry['type']} {_cell(entry['low'])} to {_cell(entry['high'])}"
    if entry.get("step"):
        text += f", step {entry['step']}"
    return text + (", log scale" if entry.get("log") else "")


def _cell(value: Any) -> str:
    # A sampled rate has 17 digits; four significant ones tell trials apart.
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


@login_required
@require_POST
def search_cancel_action(request: HttpRequest, search_id: int) -> HttpResponse:
    search = selectors.search_get(user=request.user, search_id=search_id)
    services.search_cancel(user=request.user, search=search)  # type: ignore[arg-type]
    messages.success(request, "Search canceled: its queued and training trials are stopping.")
    return redirect("search-detail", search_id=search.pk)


@login_required
@require_POST
def search_deploy_action(request: HttpRequest, search_id: int) -> HttpResponse:
    search = selectors.search_get(user=request.user, search_id=search_id)
    name = request.POST.get("model_name", "").strip()
    version = services.search_best_deploy(
        user=request.user,  # type: ignore[arg-type]
        search=search, model_name=name, tflite=request.POST.get("tflite") == "on",
    )
    messages.success(request, f"Deploying the best trial as {name} version {version.version}: "
                              "it is loading.")
    return redirect("model-detail", name=name)
