#!/usr/bin/env python
"""Django's command-line utility for the platform."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def main() -> None:
    # platform/ is a source folder, never a package: importing it as `platform` would shadow
    # the standard library module that TensorFlow, Django and uuid rely on.
    sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tfplatform.config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
