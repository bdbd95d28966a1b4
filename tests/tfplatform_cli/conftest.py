"""The installed `tfp` console script, run as a user runs it, each user with their own config."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TFP = Path(sys.executable).parent / "tfp"
TIMEOUT = 300


class Tfp:
    """One user's `tfp`: its own TFP_CONFIG_DIR and HOME, run from its own folder."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.config = home / "tfp-config"
        home.mkdir(parents=True, exist_ok=True)

    def env(self, **extra: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TFP_")}
        env |= {"HOME": str(self.home), "TFP_CONFIG_DIR": str(self.config)}
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def __call__(
        self, *args: str, stdin: str | None = None, **env: str | None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(TFP), *args],
            cwd=self.home,
            env=self.env(**env),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(TFP), *args],
            cwd=self.home,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def tfp(tmp_path: Path) -> Callable[[str], Tfp]:
    if not TFP.exists():
        pytest.fail(f"the tfp console script is not installed at {TFP}: run `make install`")
    return lambda user: Tfp(tmp_path / user)
