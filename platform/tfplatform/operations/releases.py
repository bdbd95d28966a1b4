"""Each release's schema: the last migration of every app of the platform at that release.

An installation upgrades from any of them by `manage.py migrate` (docs/operations/
deployment.md#upgrades); tests/tfplatform/operations/test_upgrade.py migrates a database with
rows in it from the last one. A release appends its own entry.
"""

from __future__ import annotations

PLATFORM_APPS = ("accounts", "cluster", "datasets", "experiments", "workspaces",
                 "modelregistry", "searches")
RELEASES: dict[str, dict[str, str]] = {
    # Before the workspaces app (the model moved from experiments, its table kept) and the
    # allocation's generic holder (it was a foreign key to experiments.Trial).
    "0.1.0": {
        "accounts": "0005_workspaces",
        "cluster": "0008_showback_allocation_utilization",
        "datasets": "0001_initial",
        "experiments": "0011_cpu_slots",
        "modelregistry": "0007_serving_sample_version",
        "searches": "0001_initial",
    },
}


def release_of(*, migrations: dict[str, list[str]]) -> str | None:
    """The release whose schema these applied migrations are, if any is: the platform's apps
    at exactly that release's last migrations."""
    last = {app: max(names) for app, names in migrations.items()
            if app in PLATFORM_APPS and names}
    return next((release for release, schema in RELEASES.items() if schema == last), None)
