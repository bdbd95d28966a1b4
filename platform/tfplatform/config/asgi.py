"""The ASGI entry point: workspaces' JupyterLab (HTTP and websockets) at `/workspaces/<id>/lab/`
through the platform's proxy, everything else Django's ASGI application.

The Procfile's `web` stays gunicorn's WSGI; the `lab` process serves this with uvicorn on the
lab's own origin (PLATFORM_WORKSPACE_LAB_ORIGIN: `make run`'s port, compose's Caddy site), where
it answers nothing but the lab. Served alone without a lab origin it is the whole platform on
one origin (the browser tests).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tfplatform.config.settings")

django_application = get_asgi_application()

from tfplatform.web.workspace_proxy import (  # noqa: E402
    lab_origin_misroute,
    workspace_not_found,
    workspace_path,
    workspace_proxy,
)


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] in ("http", "websocket") and lab_origin_misroute(scope):
        await workspace_not_found(scope, send)
        return
    if scope["type"] in ("http", "websocket") and workspace_path(scope["path"]) is not None:
        await workspace_proxy(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4404})
        return
    await django_application(scope, receive, send)
