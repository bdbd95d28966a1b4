"""A workspace session whose Python has no JupyterLab (an environment's venv or image without
it) fails at once, saying what to add, before it writes anything."""

import subprocess
import venv
from pathlib import Path

from training.isolation.runtime import repo_root

SESSION = """
import os, sys
from training.errors import UserCodeError
from training.events import EventWriter
from training.spec import TrialSpec
from training.workspace.session import workspace_serve
spec = TrialSpec(trial_id="1", model="workspace", dataset="", work_dir=sys.argv[1],
                 workspace={"socket": sys.argv[1] + "/j.sock", "jupyter_token": "t"})
try:
    events = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)
    workspace_serve(spec=spec, events=EventWriter(fd=events, task="worker-0", trial_id="1"))
except UserCodeError as error:
    print("REFUSED", error)
"""


def test_a_python_without_jupyterlab_is_refused_with_what_to_add(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # nothing but the standard library
    home = tmp_path / "home"
    home.mkdir()
    run = subprocess.run([str(bare / "bin" / "python"), "-c", SESSION, str(home),
                          str(tmp_path / "events.jsonl")],
                         capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(repo_root()), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("REFUSED This environment has no JupyterLab"), run.stdout
    assert "add `jupyterlab` to its packages" in run.stdout
    assert list(home.iterdir()) == []  # refused before writing anything
