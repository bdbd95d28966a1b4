"""HTTP client of the public REST API; every failure leaves it as a `CliError` with a message."""

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
import requests.adapters
import urllib3

from tfplatform_cli.errors import CliError, error_describe

API = "/api/v1"
TIMEOUT = (10.0, 60.0)  # (connect, read) seconds
DEPLOY_TIMEOUT = (10.0, 300.0)  # the server copies and checks the export before it answers
PAGE_SIZE = 100


# Inside a workspace the session has no network: the node relays this socket to the API.
UNIX_SOCKET_ENV = "TFP_UNIX_SOCKET"


class UnixSocketAdapter(requests.adapters.HTTPAdapter):
    """Requests to the server's URL, carried over a Unix socket: the same Host header, the same
    TLS (if the URL is https), only the transport differs."""

    def __init__(self, *, path: str) -> None:
        self.socket_path = path
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        path = self.socket_path

        def connect(self: Any) -> socket.socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(path)
            return sock

        plain = type("UnixHTTPConnection", (urllib3.connection.HTTPConnection,),
                     {"_new_conn": connect})
        secure = type("UnixHTTPSConnection", (urllib3.connection.HTTPSConnection,),
                      {"_new_conn": connect})
        self.poolmanager.pool_classes_by_scheme = {
            "http": type("UnixPool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": plain}),
            "https": type("UnixSecurePool", (urllib3.HTTPSConnectionPool,),
                          {"ConnectionCls": secure}),
        }


# TF Serving's REST calls on a model, as the platform serves them below /api/v1/models/<name>.
TF_SERVING_CALLS = {"predict": ("POST", ":predict"), "classify": ("POST", ":classify"),
                    "regress": ("POST", ":regress"), "metadata": ("GET", "/metadata"),
                    "status": ("GET", "")}


class Client:
    def __init__(self, *, server: str, token: str | None = None) -> None:
        self.server = server
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "tfp"
        if path := os.environ.get(UNIX_SOCKET_ENV):
            adapter = UnixSocketAdapter(path=path)
            self.session.mount("http://", adapter)
            self.session.mount("https://", adapter)
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        not_found: str | None = None,
        timeout: tuple[float, float] = TIMEOUT,
        **kwargs: Any,
    ) -> requests.Response:
        url = f"{self.server}{API}{path}"
        try:
            response = self.session.request(method, url, timeout=timeout, **kwargs)
        except requests.ConnectTimeout as error:
            raise CliError(f"cannot reach {self.server}: timed out") from error
        except requests.Timeout as error:
            raise CliError(f"{self.server} did not answer within {timeout[1]:g} s") from error
        except requests.ConnectionError as error:
            raise CliError(f"cannot reach {self.server}: {_reason(error)}") from error
        except requests.RequestException as error:
            raise CliError(f"request to {url} failed: {_reason(error)}") from error
        if not response.ok:
            raise CliError(self._failure(response, not_found=not_found))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as error:
            raise CliError(
                f"{self.server} did not answer with JSON: is it a TF Platform server?"
            ) from error

    def _direct(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """A call to the model server itself, failing as a call through the web app fails."""
        token = self.session.headers.get("Authorization", "")
        headers = {**kwargs.pop("headers", {}),
                   "Authorization": str(token).replace("Token ", "Bearer ", 1)}
        try:
            response = requests.request(method, url, timeout=TIMEOUT, headers=headers, **kwargs)
        except requests.RequestException as error:
            raise CliError(f"cannot reach the model server at {url}: {_reason(error)}") \
                from error
        if not response.ok:
            raise CliError(self._failure(response, not_found=None))
        return response

    def _failure(self, response: requests.Response, *, not_found: str | None) -> str:
        try:
            body = response.json()
        except ValueError:
            return f"{self.server} answered HTTP {response.status_code} {response.reason}"
        if response.status_code == 404 and not_found and isinstance(body, dict):
            return not_found
        message = error_describe(body) or f"HTTP {response.status_code} {response.reason}"
        if response.status_code == 401:
            message += " Run `tfp login`."
        return message

    # The endpoints, one method each.

    def token_obtain(self, *, username: str, password: str) -> str:
        body = self.json("POST", "/auth/token/", json={
            "username": username, "password": password, "name": f"tfp on {socket.gethostname()}"})
        return str(body["token"])

    def tokens(self) -> list[dict[str, Any]]:
        return list(self.json("GET", "/auth/tokens/"))

    def token_revoke(self, token_id: int | None = None) -> None:
        """Revokes one of your tokens, or (no id) the one this client signs with."""
        which = "current" if token_id is None else str(token_id)
        self.request("DELETE", f"/auth/tokens/{which}/", not_found=f"no token {which} of yours")

    def experiments(self, *, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every experiment the search's filters (the API's parameters) let through."""
        return self._every("/experiments/", filters)

    def experiment_annotate(self, experiment_id: int, **changes: Any) -> dict[str, Any]:
        return dict(self.json("PATCH", f"/experiments/{experiment_id}/", json=changes,
                              not_found=_gone(experiment_id)))

    def experiments_bulk(self, *, ids: list[int], action: str,
                         tags: list[str] | None = None) -> int:
        body = {"ids": ids, "action": action, "tags": tags or []}
        return int(self.json("POST", "/experiments/bulk/", json=body)["changed"])

    def datasets(self) -> list[dict[str, Any]]:
        return self._every("/datasets/", {})

    def _every(self, path: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page of a listing."""
        params: dict[str, Any] = {"limit": PAGE_SIZE, "offset": 0}
        params |= {k: v for k, v in filters.items() if v}
        found: list[dict[str, Any]] = []
        while True:
            page = self.json("GET", path, params=params)
            found.extend(page["results"])
            params["offset"] += PAGE_SIZE
            if not page["results"] or params["offset"] >= page["count"]:
                return found

    def experiment_create(
        self, *, fields: Mapping[str, Any], files: Mapping[str, tuple[str, bytes]]
    ) -> dict[str, Any]:
        if not files:
            return dict(self.json("POST", "/experiments/", json=dict(fields)))
        return dict(self.json("POST", "/experiments/", data=fields, files=files))

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return dict(
            self.json("GET", f"/experiments/{experiment_id}/", not_found=_gone(experiment_id))
        )

    def experiment_metrics(self, experiment_id: int) -> list[dict[str, Any]]:
        path = f"/experiments/{experiment_id}/metrics/"
        return list(self.json("GET", path, not_found=_gone(experiment_id)))

    def experiment_logs(self, experiment_id: int) -> str:
        path = f"/experiments/{experiment_id}/logs/"
        return str(self.json("GET", path, not_found=_gone(experiment_id))["logs"])

    def experiment_cancel(self, experiment_id: int) -> dict[str, Any]:
        path = f"/experiments/{experiment_id}/cancel/"
        return dict(self.json("POST", path, not_found=_gone(experiment_id)))

    def experiment_reproduce(self, experiment_id: int, *, allow_changes: bool) -> dict[str, Any]:
        path = f"/experiments/{experiment_id}/reproduce/"
        return dict(self.json("POST", path, json={"allow_changes": allow_changes},
                              not_found=_gone(experiment_id)))

    def experiment_lineage(self, experiment_id: int) -> dict[str, Any]:
        path = f"/experiments/{experiment_id}/lineage/"
        return dict(self.json("GET", path, not_found=_gone(experiment_id)))

    def experiment_deploy(
        self, experiment_id: int, *, model_name: str, tflite: bool = False
    ) -> dict[str, Any]:
        return dict(
            self.json(
                "POST",
                f"/experiments/{experiment_id}/deploy/",
                json={"model_name": model_name, "tflite": tflite},
                not_found=_gone(experiment_id),
                timeout=DEPLOY_TIMEOUT,
            )
        )

    def experiment_artifacts(self, experiment_id: int) -> list[dict[str, Any]]:
        path = f"/experiments/{experiment_id}/artifacts/"
        return list(self.json("GET", path, not_found=_gone(experiment_id)))

    def experiment_artifact_save(self, experiment_id: int, *, name: str, to: Path) -> int:
        """Streams one artifact into `to` (whole or not at all); returns its size."""
        path = f"/experiments/{experiment_id}/artifacts/{quote(name, safe='')}/"
        response = self.request("GET", path, stream=True)
        expected = int(response.headers.get("Content-Length") or -1)
        partial = to.with_name(f".{to.name}.part")
        written = 0
        try:
            with response, partial.open("wb") as handle:
                for chunk in response.iter_content(chunk_size=1 << 20):
                    written += handle.write(chunk)
            if expected >= 0 and written != expected:
                raise CliError(f"the download stopped after {written} of {expected} bytes")
            partial.replace(to)
        except requests.RequestException as error:
            raise CliError(f"the download stopped: {_reason(error)}") from error
        except OSError as error:
            raise CliError(f"cannot write {to}: {error.strerror or error}") from error
        finally:
            partial.unlink(missing_ok=True)
        return written

    def searches(self, *, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._every("/searches/", filters or {})

    def search_create(self, *, fields: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", "/searches/", json=dict(fields)))

    def search(self, search_id: int) -> dict[str, Any]:
        return dict(self.json("GET", f"/searches/{search_id}/", not_found=_search_gone(search_id)))

    def search_cancel(self, search_id: int) -> dict[str, Any]:
        path = f"/searches/{search_id}/cancel/"
        return dict(self.json("POST", path, not_found=_search_gone(search_id)))

    def search_best_deploy(self, search_id: int, *, model_name: str,
                           tflite: bool = False) -> dict[str, Any]:
        return dict(self.json(
            "POST", f"/searches/{search_id}/deploy-best/",
            json={"model_name": model_name, "tflite": tflite},
            not_found=_search_gone(search_id), timeout=DEPLOY_TIMEOUT,
        ))

    def search_csv(self, search_id: int) -> str:
        path = f"/searches/{search_id}/trials.csv"
        response = self.request("GET", path, not_found=_search_gone(search_id))
        response.encoding = "utf-8"  # the server says so; requests would guess otherwise
        return response.text

    def usage(self, *, query: Mapping[str, str]) -> dict[str, Any]:
        """GPU-hour showback: `query` is the API's own parameters (group_by, from, to, ...)."""
        return dict(self.json("GET", "/usage/", params=dict(query)))

    def audit(self, *, query: Mapping[str, Any]) -> dict[str, Any]:
        """One page of the audit log (staff): `query` is the API's filters, limit and offset;
        a list value (several actions) is sent as the parameter repeated."""
        return dict(self.json("GET", "/audit/", params=dict(query)))

    def usage_csv(self, *, query: Mapping[str, str]) -> bytes:
        # Bytes, not text: `tfp usage --csv` hands on the server's CSV as it came.
        return self.request("GET", "/usage.csv", params=dict(query)).content

    def model(self, name: str) -> dict[str, Any]:
        path = f"/models/{quote(name, safe='')}/"
        return dict(self.json("GET", path, not_found=f"model {name} not found"))

    def serving_endpoints(self) -> dict[str, str | None]:
        return dict(self.json("GET", "/serving/"))

    def tf_serving(
        self, name: str, *, call: str, version: int | None, label: str | None,
        body: bytes | None = None, direct: bool = False,
    ) -> tuple[Any, str | None, str | None]:
        """One of TF Serving's REST calls on a model (TF_SERVING_CALLS): the answer as TF Serving
        shapes it, and the version and label that gave it. `direct`: to the model server's own
        REST API (GET /serving/), with this client's token, instead of through the web app."""
        method, suffix = TF_SERVING_CALLS[call]
        path = f"/models/{quote(name, safe='')}"
        if version is not None:
            path += f"/versions/{version}"
        elif label:
            path += f"/labels/{quote(label, safe='')}"
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if direct:
            rest = self.serving_endpoints().get("rest")
            if not rest:
                raise CliError(f"{self.server}'s model server takes no direct calls: leave out "
                               "--direct")
            response = self._direct(method, f"{rest.rstrip('/')}/v1{path}{suffix}", data=body,
                                    headers=headers)
        else:
            response = self.request(method, f"{path}{suffix}", data=body, headers=headers)
        try:
            answer = response.json()
        except ValueError as error:
            raise CliError(f"{self.server} answered the {call} request without JSON") from error
        return (
            answer,
            response.headers.get("X-Model-Version"),
            response.headers.get("X-Model-Label"),
        )


    def workspaces(self) -> list[dict[str, Any]]:
        return self._every("/workspaces/", {})

    def workspace_create(self, *, fields: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", "/workspaces/", json=dict(fields)))

    def workspace_action(self, workspace_id: int, *, action: str,
                         fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return dict(self.json("POST", f"/workspaces/{workspace_id}/{action}/",
                              json=dict(fields or {}),
                              not_found=f"workspace {workspace_id} not found"))

    def subscriptions(self) -> list[dict[str, Any]]:
        return self._every("/notifications/subscriptions/", {})

    def subscription_create(self, *, fields: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.json("POST", "/notifications/subscriptions/", json=dict(fields)))

    def subscription_delete(self, subscription_id: int) -> None:
        self.request("DELETE", f"/notifications/subscriptions/{subscription_id}/",
                     not_found=f"subscription {subscription_id} not found")

    def webhook_secret_rotate(self) -> dict[str, Any]:
        return dict(self.json("POST", "/notifications/secret/rotate/"))

    def deliveries(self, *, query: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One page, newest first: a log keeps growing."""
        return list(self.json("GET", "/notifications/deliveries/", params=dict(query))["results"])


def _gone(experiment_id: int) -> str:
    # Someone else's experiment is "not found" as well: the API reveals nothing about it.
    return f"experiment {experiment_id} not found"


def _search_gone(search_id: int) -> str:
    return f"search {search_id} not found"


def _reason(error: BaseException) -> str:
    """The root cause under requests' and urllib3's wrappers, e.g. 'connection refused'."""
    pending: list[BaseException] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, socket.gaierror):
            return "unknown host name"
        if isinstance(current, OSError) and current.strerror:
            return str(current.strerror).lower()
        linked = [getattr(current, "reason", None), current.__cause__, current.__context__]
        pending.extend(e for e in [*linked, *current.args] if isinstance(e, BaseException))
    return str(error)
