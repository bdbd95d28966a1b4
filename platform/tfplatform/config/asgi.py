"""The ASGI entry point: workspaces' JupyterLab (HTTP and websockets) at `/workspaces/<id>/lab/`
through the platform's proxy, everything else Django's ASGI application.

The Procfile's `web` stays gunicorn's WSGI; the `lab` process serves this with uvicorn, and the
TLS proxy sends `/workspaces/*/lab/*` there (deploy/Caddyfile). Served alone it is the whole
platform on one origin (the browser tests, `make run-asgi`).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tfplatform.config.settings")

django_application = get_asgi_application()

from tfplatform.web.workspace_proxy import workspace_path, workspace_proxy  # noqa: E402


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] in ("http", "websocket") and workspace_path(scope["path"]) is not None:
        await workspace_proxy(scope, receive, send)
        return
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4404})
        return
    await django_application(scope, receive, send)
