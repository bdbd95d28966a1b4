"""Node paths out of what the platform tells users: a trial's failure reason and the platform's
own log lines name files on the worker node (its work and run folders, uploads, the platform's
and Python's files), which say how the server is laid out. They are shown as `<work>/…`,
`<platform>/…` instead. What the user's own code printed is theirs and is left as it is."""

import sys
from pathlib import Path

from django.conf import settings


def node_paths_hide(text: str) -> str:
    for prefix, shown in _prefixes():
        text = text.replace(prefix, shown)
    return text


def _prefixes() -> list[tuple[str, str]]:
    """Longest first: the work folder lies inside the var folder, inside the repository."""
    config = settings.PLATFORM
    named = [
        (config.work_dir, "<work>"),
        (config.run_dir, "<runs>"),
        (settings.MEDIA_ROOT, "<uploads>"),
        (config.environments_dir, "<environments>"),
        (config.datasets_dir, "<datasets>"),
        (config.shared_dir, "<shared>"),
        (settings.VAR_DIR, "<var>"),
        (sys.prefix, "<python>"),
        (sys.base_prefix, "<python>"),
        (settings.ROOT_DIR, "<platform>"),
    ]
    pairs = {str(Path(path)): shown for path, shown in named if str(path) not in ("", "/")}
    return sorted(pairs.items(), key=lambda pair: len(pair[0]), reverse=True)
