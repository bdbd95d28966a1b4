"""Content negotiation for endpoints that only ever answer JSON."""

from collections.abc import Iterable
from typing import Any

from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class JsonOnlyNegotiation(BaseContentNegotiation):
    """Picks the view's first parser and renderer whatever the Accept header says.

    TF Serving ignores Accept, so clients written for it may send anything; DRF's default
    answered those with 406, after parsing and ranking the header on every request.
    """

    def select_parser(
        self, request: Request, parsers: Iterable[BaseParser]
    ) -> BaseParser | None:
        return next(iter(parsers), None)

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: Any = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type
