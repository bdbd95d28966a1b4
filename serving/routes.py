"""Which version of a model a call is served by: one rule for the platform's own REST path and
for the model server's front (front.py), so both route alike. Standard library only: the web
app imports it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

CANARY, STABLE = "canary", "stable"
# Calls that run the model take the canary's share; the others describe a version, and without
# one asked for they describe the stable one (or, with no label yet, what the server serves).
RUNNING_CALLS = ("predict", "classify", "regress")


@dataclass(frozen=True)
class ModelRoute:
    """What inference needs of a model the caller may use: where its traffic goes."""

    name: str
    canary_percent: int
    labels: Mapping[str, int]


def route_choose(
    *, route: ModelRoute, call: str, version: int | None, label: str | None,
    roll: float | None = None,
) -> tuple[int | None, str | None]:
    """(version, label) to ask the model server for. An explicit version wins; a label the
    platform knows becomes its version; an unknown label goes to the server as a label, so the
    caller gets TF Serving's own error. `roll` (0-100) decides the canary share."""
    labels = route.labels
    if version is not None:
        return version, None
    if label is not None:
        return labels.get(label), label
    if call in RUNNING_CALLS:
        chosen = roll if roll is not None else random.uniform(0, 100)  # noqa: S311 - a split
        if CANARY in labels and chosen < route.canary_percent:
            return labels[CANARY], CANARY
        if STABLE in labels:
            return labels[STABLE], STABLE
        return None, None
    if call == "metadata" and STABLE in labels:
        return labels[STABLE], STABLE
    return None, None
