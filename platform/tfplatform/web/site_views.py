"""Site-wide views: the 404 and 500 answers (JSON under /api/, pages elsewhere), health."""

import sys

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from redis.exceptions import RedisError

from tfplatform.core.database import DATABASE_ERRORS
from tfplatform.core.errors import InsufficientStorage, Unavailable
from training.errors import no_space


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Not found.", "code": "not_found"}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this while handling the exception, from a view or a middleware alike.
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_ERRORS):
        return _unavailable(request=request, service="database")
    if isinstance(error, RedisError):  # the cache (throttles, token lookups) is away
        return _unavailable(request=request, service="cache")
    if error is not None and no_space(error):  # an upload or a write no service expected
        return _disk_full(request=request)
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Internal server error.", "code": "error"}, status=500)
    return render(request, "500.html", status=500)


def _unavailable(*, request: HttpRequest, service: str) -> HttpResponse:
    """The database or the cache is away (a restart, a failover): a 503 that says to come back,
    never a 500. The page stands alone: the usual layout asks the database who is signed in."""
    if request.path.startswith("/api/"):
        answer: HttpResponse = JsonResponse(
            {"error": f"The {service} is unavailable; try again shortly.",
             "code": "unavailable"},
            status=503,
        )
    else:
        answer = HttpResponse(loader.render_to_string("503.html"), status=503)
    answer["Retry-After"] = str(Unavailable.retry_after_seconds)
    return answer


def _disk_full(*, request: HttpRequest) -> HttpResponse:
    """The server's disk is full (507): the operator's to fix, the client's to retry later."""
    error = InsufficientStorage()
    if request.path.startswith("/api/"):
        answer: HttpResponse = JsonResponse({"error": error.message, "code": error.code},
                                            status=error.status_code)
    else:
        answer = render(request, "error.html", {"message": error.message},
                        status=error.status_code)
    answer["Retry-After"] = str(error.retry_after_seconds)
    return answer


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: answers only if the database does."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
