"""Which model versions are loaded: TF Serving's ServerCore, AspiredVersionsManager and
ServableStateMonitor in one place.

Availability comes first, as with TF Serving's AvailabilityPreservingPolicy: new versions load
while the old ones keep serving, the serving map is swapped in one assignment, and only then are
unwanted versions unloaded (each unload waits for the requests still using it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorflow_serving.apis import model_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving import layout
from serving.config import aspired_versions
from serving.errors import Code, ServingError, invalid_argument
from serving.metrics import served_version_set
from serving.servable import Servable

log = logging.getLogger(__name__)

ServableFactory = Callable[[str, int, Path], Servable]
_PLATFORM = "tensorflow"


@dataclass(frozen=True)
class VersionState:
    """One ModelVersionStatus: START, LOADING, AVAILABLE, UNLOADING or END, plus its health."""

    state: str
    error: ServingError | None = None


def _validate(config: model_server_config_pb2.ModelServerConfig) -> None:
    """ValidateModelConfigList and GetPlatform from server_core.cc."""
    seen: set[str] = set()
    for model in config.model_config_list.config:
        if model.name in seen:
            raise invalid_argument(
                f"Illegal to list model {model.name} multiple times in config list"
            )
        seen.add(model.name)
        if not model.base_path.startswith("/") and "://" not in model.base_path:
            raise invalid_argument(
                f"Expected model {model.name} to have an absolute path or URI; got "
                f"base_path()={model.base_path}"
            )
        platform = model.model_platform
        if model.model_type:  # deprecated enum: TENSORFLOW = 1
            if platform:
                raise invalid_argument(
                    "Illegal setting both ModelServerConfig::model_type (deprecated) and "
                    f"ModelServerConfig::model_platform, model name is {model.name}"
                )
            platform = _PLATFORM if model.model_type == 1 else ""
        if not platform:
            raise invalid_argument(
                "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
                f"ModelServerConfig::model_platform, model name is {model.name}"
            )
        if platform != _PLATFORM:
            raise invalid_argument(f"Model {model.name} requests unsupported platform {platform}")


class ModelManager:
    def __init__(
        self,
        *,
        factory: ServableFactory,
        allow_version_labels_for_unavailable_models: bool = False,
    ) -> None:
        self._factory = factory
        self._allow_unavailable_labels = allow_version_labels_for_unavailable_models
        self._config_lock = threading.Lock()  # one reload or poll at a time
        self._lock = threading.Lock()  # guards the maps below; never held while loading
        self._config = model_server_config_pb2.ModelServerConfig()
        self._serving: dict[str, dict[int, Servable]] = {}
        self._labels: dict[str, dict[str, int]] = {}
        self._states: dict[str, dict[int, VersionState]] = {}
        # Failed loads are not retried while the version stays wanted (as in TF Serving);
        # once it drops out of the aspired set, wanting it again means loading it again.
        self._failed: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # ---- configuration -------------------------------------------------------------------

    def reload_config(self, config: model_server_config_pb2.ModelServerConfig) -> None:
        """ServerCore::ReloadConfig. Unlike TF Serving, which waits only for newly added models,
        every load and unload this config implies is done before returning."""
        if config.WhichOneof("config") is None:
            log.info("Taking no action for empty config.")
            return
        if config.WhichOneof("config") != "model_config_list":
            raise invalid_argument("Invalid ServerModelConfig")
        _validate(config)
        with self._config_lock:
            labels = self._label_map(config)
            old_names = {model.name for model in self._config.model_config_list.config}
            self._config = model_server_config_pb2.ModelServerConfig()
            self._config.CopyFrom(config)
            with self._lock:
                self._labels = labels
            new_names = {m.name for m in config.model_config_list.config} - old_names
            failures = self._sync(new_models=new_names)
        if failures:
            details = "".join(
                f"{{{{name: {name} version: {version}}} due to error: {error}}}, "
                for name, version, error in failures
            )
            raise ServingError(
                Code.UNKNOWN, f"{len(failures)} model(s) did not become available: {{{details}}}"
            )

    def _label_map(self, config: model_server_config_pb2.ModelServerConfig) -> dict[str, Any]:
        """UpdateModelVersionLabelMap: labels may only point at versions already AVAILABLE."""
        result: dict[str, dict[str, int]] = {}
        with self._lock:
            for model in config.model_config_list.config:
                for label, version in model.version_labels.items():
                    current = self._labels.get(model.name, {}).get(label)
                    allowed = self._allow_unavailable_labels and current in (None, version)
                    state = self._states.get(model.name, {}).get(version)
                    if not allowed and (state is None or state.state != "AVAILABLE"):
                        raise ServingError(
                            Code.FAILED_PRECONDITION,
                            f"Request to assign label to version {version} of model {model.name}, "
                            "which is not currently available for inference",
                        )
                    result.setdefault(model.name, {})[label] = version
        return result

    def config(self) -> model_server_config_pb2.ModelServerConfig:
        with self._config_lock:
            copy = model_server_config_pb2.ModelServerConfig()
            copy.CopyFrom(self._config)
            return copy

    # ---- loading and unloading ----------------------------------------------------------

    def poll(self) -> None:
        """One pass of the file system poll: pick up new or removed version directories."""
        with self._config_lock:
            self._sync(new_models=set())

    def start_polling(self, *, interval_seconds: float) -> None:
        if interval_seconds <= 0 or self._poller is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_seconds):
                try:
                    self.poll()
                except Exception:  # the poller must outlive a bad model directory
                    log.exception("file system poll failed")

        self._poller = threading.Thread(target=loop, name="fs-poll", daemon=True)
        self._poller.start()

    def _set_state(self, name: str, version: int, state: VersionState) -> None:
        with self._lock:
            self._states.setdefault(name, {})[version] = state

    def _publish(self, name: str, versions: dict[int, Servable]) -> None:
        with self._lock:
            serving = dict(self._serving)
            if versions:
                serving[name] = versions
            else:
                serving.pop(name, None)
            self._serving = serving  # readers take the whole map in one read

    def _sync(self, *, new_models: set[str]) -> list[tuple[str, int, ServingError]]:
        models = {m.name: m for m in self._config.model_config_list.config}
        with self._lock:
            names = set(models) | set(self._serving)
        failures: list[tuple[str, int, ServingError]] = []
        for name in sorted(names):
            model = models.get(name)
            aspired: set[int] = set()
            if model is not None:
                aspired = self._aspired(model)
            self._failed = {(n, v) for n, v in self._failed if n != name or v in aspired}
            errors = self._load_missing(name, aspired, Path(model.base_path) if model else None)
            self._unload_unaspired(name, aspired)
            if name in new_models and errors and not self._serving.get(name):
                failures.extend((name, version, error) for version, error in errors)
        return failures

    def _aspired(self, model: model_server_config_pb2.ModelConfig) -> set[int]:
        path = Path(model.base_path)
        on_disk = layout.list_versions(model_path=path)
        if not on_disk:
            log.warning(
                "No versions of servable %s found under base path %s. Did you forget to name "
                "your leaf directory as a number (eg. '/1/')?",
                model.name,
                path,
            )
        aspired, missing = aspired_versions(policy=model.model_version_policy, available=on_disk)
        for version in missing:
            log.warning("Version %d of servable %s not found under %s", version, model.name, path)
        return aspired

    def _load_missing(
        self, name: str, aspired: set[int], base: Path | None
    ) -> list[tuple[int, ServingError]]:
        errors: list[tuple[int, ServingError]] = []
        with self._lock:
            serving = dict(self._serving.get(name, {}))
        for version in sorted(aspired, reverse=True):
            if version in serving or (name, version) in self._failed:
                continue
            assert base is not None
            self._set_state(name, version, VersionState("LOADING"))
            try:
                path = layout.version_path(model_path=base, version=version)
                servable = self._factory(name, version, path)
            except ServingError as exc:
                error = exc
            except (OSError, ValueError) as exc:
                error = ServingError(Code.NOT_FOUND, str(exc))
            else:
                serving[version] = servable
                self._publish(name, dict(serving))
                self._set_state(name, version, VersionState("AVAILABLE"))
                log.info(
                    "Successfully loaded servable version {name: %s version: %d}", name, version
                )
                continue
            log.error("Loading servable %s version %d failed: %s", name, version, error)
            self._set_state(name, version, VersionState("END", error))
            self._failed.add((name, version))
            errors.append((version, error))
        return errors

    def _unload_unaspired(self, name: str, aspired: set[int]) -> None:
        with self._lock:
            serving = dict(self._serving.get(name, {}))
        unaspired = sorted(v for v in serving if v not in aspired)
        if not unaspired:
            return
        if aspired and not any(v in aspired for v in serving):
            # Nothing wanted is up (its load failed): keep the newest old version serving.
            unaspired = unaspired[:-1]
        for version in unaspired:
            servable = serving.pop(version)
            self._set_state(name, version, VersionState("UNLOADING"))
            self._publish(name, dict(serving))
            servable.close()
            self._set_state(name, version, VersionState("END"))
            log.info("Unloaded servable version {name: %s version: %d}", name, version)

    # ---- lookups ------------------------------------------------------------------------

    @contextmanager
    def handle(self, spec: model_pb2.ModelSpec) -> Iterator[Servable]:
        """GetServableHandle: the servable a ModelSpec names, held for the duration."""
        if not spec.name:
            raise invalid_argument("ModelSpec has no name specified.")
        choice = spec.WhichOneof("version_choice")
        while True:
            with self._lock:
                versions = self._serving.get(spec.name, {})
                if choice == "version":
                    version: int | None = spec.version.value
                    request = f"Specific({spec.name}, {version})"
                elif choice == "version_label":
                    version = self._labels.get(spec.name, {}).get(spec.version_label)
                    if version is None:
                        raise invalid_argument(
                            f"Unrecognized servable version label: {spec.version_label}"
                        )
                    request = f"Specific({spec.name}, {version})"
                else:
                    version = max(versions) if versions else None
                    request = f"Latest({spec.name})"
                servable = versions.get(version) if version is not None else None
            if servable is None:
                raise ServingError(Code.NOT_FOUND, f"Servable not found for request: {request}")
            if servable.acquire():
                break  # else it is being unloaded: the map already changed, look again
        served_version_set(servable.version)  # the request's metrics count it for this version
        try:
            yield servable
        finally:
            servable.release()

    def version_states(self, name: str) -> dict[int, VersionState]:
        with self._lock:
            return dict(self._states.get(name, {}))

    def servable_runs(self, *, name: str, version: int) -> int:
        with self._lock:
            servable = self._serving.get(name, {}).get(version)
        return servable.runs if servable else 0

    def close(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
        with self._config_lock:
            with self._lock:
                serving, self._serving = self._serving, {}
            for versions in serving.values():
                for servable in versions.values():
                    servable.close()
