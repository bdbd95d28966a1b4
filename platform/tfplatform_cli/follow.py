"""Watching an experiment until it finishes (new log lines, state changes) or a search until it
ends (its trials' changes)."""

import sys
import time
from typing import Any

from tfplatform_cli.client import Client
from tfplatform_cli.search_render import trial_event

FINISHED = ("completed", "failed", "canceled")
POLL_SECONDS = 1.0
ANCHOR_LINES = 20


def lines_new(seen: list[str], current: list[str]) -> list[str]:
    """The lines of `current` not yet printed, given the `seen` lines printed before.

    The server keeps only the newest part of long logs, so `current` may have lost its start:
    the new lines are then those after the last lines we printed.
    """
    if current[: len(seen)] == seen:
        return current[len(seen) :]
    anchor = seen[-ANCHOR_LINES:]
    for end in range(len(anchor), len(current) + 1):
        if current[end - len(anchor) : end] == anchor:
            return current[end:]
    return current  # nothing in common any more: better to repeat than to lose lines


def experiment_follow(
    client: Client,
    experiment_id: int,
    *,
    logs: bool,
) -> dict[str, Any]:
    """Poll until it finishes; print new log lines on stdout, state changes on stderr.

    The state is read before the logs, so once it is final the logs read after it are complete.
    """
    seen: list[str] = []
    shown = ""
    while True:
        experiment = client.experiment(experiment_id)
        state = str(experiment["state"])
        finished = state in FINISHED
        status = state + (f": {experiment['pending_reason']}" if _waiting(experiment) else "")
        if status != shown and not finished:
            print(f"experiment {experiment_id} {status}", file=sys.stderr, flush=True)
            shown = status
        if logs:
            lines = client.experiment_logs(experiment_id).split("\n")
            # "" after a final newline; otherwise a line that, while it runs, may still grow.
            last = lines.pop()
            complete = [*lines, last] if finished and last else lines
            for line in lines_new(seen, complete):
                print(line)
            sys.stdout.flush()
            seen = complete
        if finished:
            print(f"experiment {experiment_id} {state}", file=sys.stderr, flush=True)
            return experiment
        time.sleep(POLL_SECONDS)


def _waiting(experiment: dict[str, Any]) -> bool:
    return experiment["state"] in ("queued", "scheduled") and bool(experiment.get("pending_reason"))


LOADING_STATES = ("pending", "loading")
LOAD_WAIT_SECONDS = 600.0


def version_wait(client: Client, *, name: str, version: int,
                 timeout: float = LOAD_WAIT_SECONDS) -> dict[str, Any]:
    """Poll the model until `version` has loaded or failed; its entry (state, error)."""
    deadline = time.monotonic() + timeout
    while True:
        entry = next((v for v in client.model(name)["versions"] if v["version"] == version),
                     {"version": version, "state": "unloaded", "error": "it was undeployed"})
        if entry["state"] not in LOADING_STATES or time.monotonic() > deadline:
            return entry
        time.sleep(POLL_SECONDS)


def search_follow(client: Client, search_id: int) -> dict[str, Any]:
    """Poll until the search ends; print each trial's changes (state, rung, outcome) on stdout,
    the search's own state on stderr. The trials come with the search in one answer, so the
    last lines printed are the trials as the search ended."""
    shown: dict[int, tuple[str, str, int]] = {}
    first = True
    while True:
        search = client.search(search_id)
        if first and search["state"] == "running":
            print(f"search {search_id} running", file=sys.stderr, flush=True)
        first = False
        for trial in search["trials"]:
            key = (str(trial["state"]), str(trial["outcome"]), int(trial["rung"]))
            if shown.get(trial["index"]) != key:
                print(trial_event(search, trial, first=trial["index"] not in shown), flush=True)
                shown[trial["index"]] = key
        if search["state"] != "running":
            return search
        time.sleep(POLL_SECONDS)
