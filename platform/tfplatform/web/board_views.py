"""TensorBoard of experiments behind the sign-in: the link that opens a board, and the proxy
that serves it (experiments/boards/)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.http.response import HttpResponseBase
from django.shortcuts import redirect
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from tfplatform.experiments.boards import registry as boards
from tfplatform.experiments.boards.proxy import board_proxy
from tfplatform.web.compare_views import compare_ids_named


@login_required
@require_GET
def board_open_page(request: HttpRequest) -> HttpResponse:
    """`?ids=3,7`: starts (or finds) the board of those experiments and goes there."""
    ids = compare_ids_named(request, what="show in TensorBoard")
    board = boards.board_open(user=request.user, experiment_ids=ids)
    return redirect(board.path)


# TensorBoard's own pages post queries without Django's CSRF token; they change nothing, and
# the proxy refuses a POST without their X-XSRF-Protected header, which no other site can set.
@csrf_exempt
@xframe_options_sameorigin  # TensorBoard frames some of its own plugins
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def board_proxy_view(request: HttpRequest, key: str, rest: str = "") -> HttpResponseBase:
    boards.board_experiments(user=request.user, key=key)  # 404 unless they may see them all
    if request.method == "POST" and request.headers.get("X-XSRF-Protected") != "1":
        return HttpResponseForbidden("TensorBoard's queries carry its X-XSRF-Protected header.\n",
                                     content_type="text/plain")
    return board_proxy(request=request, key=key)
