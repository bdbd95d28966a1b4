"""Landlock for every process of the platform that narrows itself: a trial's task host
(training/), the embedded model server and its TF Lite converter (serving/) and a hosted
TensorBoard. One implementation, so a fix to the rules reaches them all.

It imports nothing of the platform (import-linter holds it): a trial's sandbox and a derived
image show it, read-only, beside `training/`, and nothing else of the repository.
"""

from confinement.fork import confined_fork
from confinement.landlock import (
    SCOPES_ABI,
    TCP_PORTS_ABI,
    Confinement,
    ConfinementError,
    abi_probe,
    confine_apply,
)

__all__ = ["SCOPES_ABI", "TCP_PORTS_ABI", "Confinement", "ConfinementError", "abi_probe",
           "confine_apply", "confined_fork"]
