"""Staff environment pages: the list with each node's build, the create/edit form, build logs."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from tfplatform.core.errors import PlatformError
from tfplatform.experiments import environments
from tfplatform.experiments.selectors.environments import (
    environment_build_get,
    environment_get,
    environment_list,
)
from tfplatform.web.cluster_views import staff_only
from tfplatform.web.forms import EnvironmentForm


@staff_only
@require_GET
def environment_list_page(request: HttpRequest) -> HttpResponse:
    return render(
        request, "environments/list.html", {"environments": environment_list()}
    )


@staff_only
def environment_new_page(request: HttpRequest) -> HttpResponse:
    form = EnvironmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            environment = environments.environment_create(**form.cleaned_data,
                                                          actor=request.user)
        except PlatformError as error:
            form.add_error(_form_field(error.field), error.message)
        else:
            messages.success(request, f"Environment '{environment.name}' created.")
            return redirect("environment-list")
    return render(request, "environments/form.html", {"form": form, "environment": None})


@staff_only
def environment_edit_page(request: HttpRequest, environment_id: int) -> HttpResponse:
    environment = environment_get(environment_id=environment_id)
    form = (
        EnvironmentForm(request.POST)
        if request.method == "POST"
        else EnvironmentForm.for_environment(environment)
    )
    if request.method == "POST" and form.is_valid():
        try:
            environments.environment_update(environment=environment, **form.cleaned_data,
                                            actor=request.user)
        except PlatformError as error:
            form.add_error(_form_field(error.field), error.message)
        else:
            messages.success(request, f"Environment '{environment.name}' saved.")
            return redirect("environment-list")
    return render(
        request, "environments/form.html", {"form": form, "environment": environment}
    )


@staff_only
@require_POST
def environment_delete_action(request: HttpRequest, environment_id: int) -> HttpResponse:
    environment = environment_get(environment_id=environment_id)
    environments.environment_delete(environment=environment, actor=request.user)
    messages.success(request, f"Environment '{environment.name}' deleted.")
    return redirect("environment-list")


@staff_only
@require_GET
def environment_build_log_page(request: HttpRequest, build_id: int) -> HttpResponse:
    build = environment_build_get(build_id=build_id)
    return render(request, "environments/build_log.html", {"build": build})


def _form_field(field: str | None) -> str | None:
    return field if field in EnvironmentForm.base_fields else None
