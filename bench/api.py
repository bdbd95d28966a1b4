"""The platform's REST API as the benchmarks use it: submit, wait, read metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests

FINISHED = ("completed", "failed", "canceled")


class PlatformError(RuntimeError):
    pass


@dataclass
class PlatformClient:
    base_url: str
    token: str
    session: requests.Session = field(default_factory=requests.Session)
    environment: str | None = None  # every experiment's; None: the platform's default

    def __post_init__(self) -> None:
        self.session.headers["Authorization"] = f"Token {self.token}"

    def _call(self, method: str, path: str, *, expect: int = 200, **kwargs: Any) -> Any:
        answer = self.session.request(method, f"{self.base_url}{path}", timeout=300, **kwargs)
        if answer.status_code != expect:
            raise PlatformError(f"{method} {path} → {answer.status_code}: {answer.text[:500]}")
        return answer.json()

    def experiment_submit(self, *, name: str, model: str, dataset: str,
                          hyperparameters: dict[str, Any], resources: dict[str, Any],
                          target_accuracy: float | None) -> dict[str, Any]:
        body = {
            "name": name, "model": model, "dataset": dataset,
            "hyperparameters": hyperparameters, "resources": resources,
            "target_accuracy": target_accuracy, "max_restarts": 0,
        }
        if self.environment:
            body["environment"] = self.environment
        return dict(self._call("POST", "/api/v1/experiments/", expect=201, json=body))

    def environment_create(self, *, name: str, image: str) -> str:
        self._call("POST", "/api/v1/environments/", expect=201, json={
            "name": name, "image": image, "tensorflow_version": "2.21.0", "gpu_capable": True,
        })
        return name

    def spark_cluster_register(self, *, cluster: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", "/api/v1/spark-clusters/", expect=201, json=cluster))

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/nodes/").get("results", []))

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/experiments/{experiment_id}/"))

    def metrics(self, experiment_id: int, name: str | None = None) -> list[dict[str, Any]]:
        query = f"?name={name}" if name else ""
        return list(self._call("GET", f"/api/v1/experiments/{experiment_id}/metrics/{query}"))

    def experiment_wait(self, experiment_id: int, *, timeout: float,
                        poll_seconds: float = 1.5) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body = self.experiment(experiment_id)
            if body["state"] in FINISHED:
                if body["state"] != "completed":
                    logs = self._call("GET", f"/api/v1/experiments/{experiment_id}/logs/?tail=40")
                    raise PlatformError(
                        f"experiment {experiment_id} {body['state']}: {body.get('error')}\n"
                        f"{logs.get('logs', '')}"
                    )
                return body
            if time.monotonic() > deadline:
                raise PlatformError(f"experiment {experiment_id} still {body['state']} after "
                                    f"{timeout:.0f}s")
            # Each poll costs the web process CPU the training shares: not too often.
            time.sleep(poll_seconds)

    def model_register_path(self, *, model_name: str, path: str,
                            timeout: float = 300.0) -> dict[str, Any]:
        """Registers and waits for the model loader: the version's entry once loaded."""
        body = {"model_name": model_name, "path": path}
        version = dict(self._call("POST", "/api/v1/models/", expect=202, json=body))
        deadline = time.monotonic() + timeout
        while True:
            model = self._call("GET", f"/api/v1/models/{model_name}/", expect=200)
            [entry] = [v for v in model["versions"] if v["version"] == version["version"]]
            if entry["state"] == "available":
                return {**version, **entry}
            if entry["state"] != "loading" or time.monotonic() > deadline:
                raise PlatformError(f"{model_name} v{version['version']} is {entry['state']}: "
                                    f"{entry.get('error')}")
            time.sleep(0.2)


def timestamp(text: str | None) -> float | None:
    """An API timestamp (ISO 8601) as POSIX seconds, or None when absent."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
