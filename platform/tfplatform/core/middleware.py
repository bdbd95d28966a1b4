"""Refuses a URL holding a NUL character before any view looks a name up with it: PostgreSQL
cannot compare text with NUL in it (a 500 the API fuzzer found through `/models/<name>/`)."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

NUL = "\x00"


class NulRefusingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if NUL in request.path or "%00" in query or NUL in query:
            return JsonResponse({"error": "The URL holds a NUL character."}, status=400)
        return self.get_response(request)
