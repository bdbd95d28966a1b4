"""The one error path of the HTML pages, as `core/api.py` is the API's: a `PlatformError` a
page's view lets through becomes the 404 page (NotFound), or, after a form's POST, a message on
the page the form was sent from; after a GET, the error page with the error's status."""

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from tfplatform.core.errors import NotFound, PlatformError


class PlatformErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, PlatformError) or request.path.startswith("/api/"):
            return None  # the API's handler, or Django's own 500
        if isinstance(exception, NotFound):
            return render(request, "404.html", {"message": exception.message}, status=404)
        if request.method == "POST":
            messages.error(request, exception.message)
            return HttpResponseRedirect(_back(request))
        return render(request, "error.html", {"message": exception.message},
                      status=exception.status_code)


def _back(request: HttpRequest) -> str:
    """The page the form was on (its Referer, when it is ours), else the object the action URL
    belongs to (`/experiments/5/cancel/` → `/experiments/5/`)."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(
            referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return referer
    return request.path.rstrip("/").rsplit("/", 1)[0] + "/"
