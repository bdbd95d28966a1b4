"""Experiments of a kind that opens a session (a workspace's JupyterLab): what the trial's node
does at its start and end, and with what it watches meanwhile.

The app that owns the kind registers its hooks when it is ready (tfplatform.workspaces does):
it sits above this app, which calls it through here without importing it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tfplatform.experiments.models import Trial


@dataclass(frozen=True)
class SessionGrant:
    workspace_id: int
    api_token: str
    jupyter_token: str
    socket: str
    home: str

    @property
    def base_url(self) -> str:
        return f"/workspaces/{self.workspace_id}/lab/"  # the proxy's path, which Jupyter serves


@dataclass(frozen=True, kw_only=True)
class SessionHooks:
    # A session's start: what its node hands the process (tokens, socket, home).
    begin: Callable[..., SessionGrant]
    # Its end: what was granted stops working. Called with trial=.
    end: Callable[..., None]
    # The process answered, last active at `at`. Called with experiment_id= and at=.
    activity_record: Callable[..., None]
    # What a node starts before it takes sessions of this kind (the workspaces' relay to other
    # machines). Called with address=, the node's --address.
    node_start: Callable[..., None] | None = None


_hooks: dict[str, SessionHooks] = {}


def session_hooks_register(*, kind: str, hooks: SessionHooks) -> None:
    _hooks[kind] = hooks


def session_hooks_for(*, kind: str) -> SessionHooks | None:
    return _hooks.get(kind)


def session_begin(*, trial: Trial) -> SessionGrant:
    return _hooks[trial.experiment.kind].begin(trial=trial)


def session_end(*, trial: Trial) -> None:
    _hooks[trial.experiment.kind].end(trial=trial)


def session_activity_record(*, kind: str, experiment_id: int, at: datetime) -> None:
    _hooks[kind].activity_record(experiment_id=experiment_id, at=at)


def sessions_node_start(*, address: str) -> None:
    for hooks in _hooks.values():
        if hooks.node_start is not None:
            hooks.node_start(address=address)
