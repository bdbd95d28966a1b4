"""Site-wide views: the 404 and 500 answers (JSON under /api/, pages elsewhere), health."""

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Not found.", "code": "not_found"}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Internal server error.", "code": "error"}, status=500)
    return render(request, "500.html", status=500)


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: answers only if the database does."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
