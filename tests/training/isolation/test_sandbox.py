"""bubblewrap as GPU servers ship it: the sandbox's argv follows what the node's bwrap knows,
and what an old one cannot do safely is refused, never done the unsafe way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from training.errors import InvalidInput
from training.isolation.runtime import TaskPython
from training.isolation.sandbox import Exposure, bwrap_options, sandbox_command

# The option lines of `bwrap --help` from bubblewrap 0.6.1 (Ubuntu 22.04 before its
# CVE-2024-42472 update): no --disable-userns, no --ro-bind-fd.
OLD_USAGE = """usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --unshare-user               Create new user namespace (may be automatically implied)
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --unshare-cgroup-try         Create new cgroup namespace if possible else continue by skipping
    --uid UID                    Custom uid in the sandbox (requires --unshare-user or --userns)
    --gid GID                    Custom gid in the sandbox (requires --unshare-user or --userns)
    --ro-bind SRC DEST           Bind mount the host path SRC readonly on DEST
    --ro-bind-try SRC DEST       Equal to --ro-bind but ignores non-existent SRC
    --seccomp FD                 Load and use seccomp rules from FD (not repeatable)
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap dies.
    --as-pid-1                   Do not install a reaper process with PID=1
"""


@pytest.fixture
def old_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A `bwrap` first on PATH that answers --help as 0.6.1 does."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat <<'USAGE'\n{OLD_USAGE}USAGE\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    bwrap_options.cache_clear()
    yield
    bwrap_options.cache_clear()


def test_this_machines_bwrap_disables_user_namespaces_itself() -> None:
    argv = sandbox_command(python=TaskPython(), exposure=Exposure(), seccomp_fd=3)
    assert "--disable-userns" in argv and "--seccomp" in argv


@pytest.mark.usefixtures("old_bwrap")
def test_an_old_bwrap_leaves_user_namespaces_to_the_filter() -> None:
    assert "--ro-bind-fd" not in bwrap_options() and "--unshare-net" in bwrap_options()
    argv = sandbox_command(python=TaskPython(), exposure=Exposure(), seccomp_fd=3)
    assert "--disable-userns" not in argv
    assert argv[argv.index("--seccomp") + 1] == "3"  # the filter refuses them instead


@pytest.mark.usefixtures("old_bwrap")
def test_an_old_bwrap_cannot_bind_a_dataset_by_descriptor_so_the_trial_is_refused(
    tmp_path: Path,
) -> None:
    folder = str(tmp_path / "team" / "digits")
    with pytest.raises(InvalidInput, match="bound by descriptor"):
        sandbox_command(python=TaskPython(), exposure=Exposure(read=(folder,)), seccomp_fd=3,
                        pinned_fds={folder: 7})
