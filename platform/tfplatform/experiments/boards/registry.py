"""TensorBoard of one or several experiments, served behind the platform's sign-in.

A board is one `tensorboard` process (`boards/host.py`) for one set of experiments, named by their
ids sorted and joined by dashes (the key, e.g. `3-7`) and served at `/tensorboard/<key>/`
through the platform's proxy (`board_proxy`). Whoever may see every one of those experiments
(owner, team, staff: `experiment_list`) reaches it; anyone else gets 404, whatever key or path
they try, since visibility is checked on every request, before the request goes anywhere.

Each run is an experiment's `<work_dir>/tensorboard` (written by the trial's chief,
`training/board_layout.py`), found from the experiment's id as the artifacts are
(`experiment_work_dir`), named `<id>-<name>`; a folder that is a link is left out, and the process
itself reads nothing else (Landlock), so a link a trial planted inside leads nowhere.

Any web process may start a board or serve one another started: the boards are recorded in
`PLATFORM.board_dir` (`<key>.json`: port, token, pid, runs; written under a `<key>.lock`
file lock, so two processes never start the same one), and a proxied request touches the record,
whose age is the board's idleness. A board is the child of the web process that started it, dies
with it (its stdin is a pipe from it) and is stopped by it after `BOARD_IDLE_SECONDS` without a
request; at most `BOARD_MAX` run at once (the least recently used one makes room). A run folder
that appears after its board started (the experiment was queued) starts it again when the board
is next opened, or its page next reloads its runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import requests
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from tfplatform.accounts.models import User
from tfplatform.core.errors import NotFound, Unavailable
from tfplatform.experiments.boards.host import TOKEN_ENV
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.experiments import experiment_list
from tfplatform.experiments.services.execution import experiment_work_dir
from training.isolation.private_files import private_write_text

logger = logging.getLogger(__name__)

URL_PREFIX = "/tensorboard"
BOARD_MAX_EXPERIMENTS = 20
START_SECONDS = 60.0
TOUCH_SECONDS = 10.0  # a record is touched at most this often
_KEY = re.compile(rf"[1-9][0-9]{{0,11}}(-[1-9][0-9]{{0,11}}){{0,{BOARD_MAX_EXPERIMENTS - 1}}}")

_children: dict[str, subprocess.Popen[bytes]] = {}  # this process's boards, by key
_children_lock = threading.Lock()
_reaper: threading.Thread | None = None
_session = requests.Session()
_session.headers.clear()  # asks the board alone, with none of this process's defaults


@dataclass(frozen=True)
class Board:
    key: str
    port: int
    token: str
    pid: int
    runs: dict[str, str]  # name → folder

    @property
    def path(self) -> str:
        return f"{URL_PREFIX}/{self.key}/"


def board_key(*, experiment_ids: list[int]) -> str:
    return "-".join(str(pk) for pk in sorted(set(experiment_ids)))


def board_experiments(*, user: User | AnonymousUser, key: str) -> list[Experiment]:
    """The experiments a key names, when the user may see every one; else NotFound, for an
    unknown id, someone else's and a malformed key alike."""
    if not _KEY.fullmatch(key):
        raise NotFound("TensorBoard not found.")
    ids = [int(part) for part in key.split("-")]
    if board_key(experiment_ids=ids) != key:  # one name per set: sorted, no repeats
        raise NotFound("TensorBoard not found.")
    found = list(experiment_list(user=user).filter(pk__in=ids).order_by("pk"))
    if len(found) != len(ids):
        raise NotFound("TensorBoard not found.")
    return found


def board_open(*, user: User | AnonymousUser, experiment_ids: list[int]) -> Board:
    """The running board of these experiments (started, or started again if a run folder has
    appeared since), for a user who may see them all."""
    if not experiment_ids:
        raise NotFound("Name the experiments to show in TensorBoard.")
    key = board_key(experiment_ids=experiment_ids)
    return board_ensure(experiments=board_experiments(user=user, key=key), fresh=True)


def board_runs(*, experiments: list[Experiment]) -> dict[str, str]:
    """Each experiment's TensorBoard folder that exists and is no link, by run name."""
    runs = {}
    for experiment in experiments:
        work = experiment_work_dir(experiment_id=experiment.pk)
        folder = work / "tensorboard"
        real = Path(os.path.realpath(folder))
        expected = Path(os.path.realpath(settings.PLATFORM.work_dir)) / work.name / folder.name
        if real == expected and real.is_dir():
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", experiment.name).strip("-")[:40]
            runs[f"{experiment.pk}-{slug}" if slug else str(experiment.pk)] = str(real)
    return runs


def board_ensure(*, experiments: list[Experiment], fresh: bool = False) -> Board:
    """The board of these experiments, running; `fresh`: restarted when its runs changed."""
    key = board_key(experiment_ids=[e.pk for e in experiments])
    runs = board_runs(experiments=experiments)
    with _locked(key):
        board = board_record_read(key)
        if board is not None and board_alive(board) and (not fresh or board.runs == runs):
            board_touch(key, force=True)
            return board
        if board is not None:
            _stop(board)
        _room_make()
        board = _start(key=key, runs=runs)
        return board


def boards_reap(*, idle_seconds: float) -> list[str]:
    """Stops this process's boards idle that long, or whose process ended; their keys."""
    stopped = []
    with _children_lock:
        keys = list(_children)
    for key in keys:
        with _locked(key):
            board = board_record_read(key)
            child = _children.get(key)
            if child is None:
                continue
            try:
                idle = time.time() - _record_path(key).stat().st_mtime
            except OSError:  # another process stopped it
                idle = idle_seconds
            if child.poll() is not None or board is None or idle >= idle_seconds:
                _stop(board or Board(key=key, port=0, token="", pid=child.pid, runs={}))
                stopped.append(key)
    return stopped


def _folder() -> Path:
    folder = Path(settings.PLATFORM.board_dir)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def _record_path(key: str) -> Path:
    return _folder() / f"{key}.json"


@contextlib.contextmanager
def _locked(key: str) -> Iterator[None]:
    with (_folder() / f"{key}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def board_record_read(key: str) -> Board | None:
    try:
        data = json.loads(_record_path(key).read_text())
        return Board(**data)
    except (OSError, ValueError, TypeError):
        return None


def board_touch(key: str, *, force: bool = False) -> None:
    path = _record_path(key)
    with contextlib.suppress(OSError):
        if force or time.time() - path.stat().st_mtime > TOUCH_SECONDS:
            os.utime(path)


def board_alive(board: Board) -> bool:
    """Its process runs and is that board (a pid can be reused)."""
    try:
        command = Path(f"/proc/{board.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{URL_PREFIX}/{board.key}".encode() in command and b"--port" in command


def _stop(board: Board) -> None:
    with _children_lock:
        child = _children.pop(board.key, None)
    if child is not None:
        child.terminate()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    # Another web process's: the record says which, its command line agrees.
    elif board_alive(board):
        with contextlib.suppress(OSError):
            os.kill(board.pid, signal.SIGTERM)
    with contextlib.suppress(OSError):
        _record_path(board.key).unlink()


def _room_make() -> None:
    """At most BOARD_MAX boards: the least recently used others go."""
    records = sorted(_folder().glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    running = [board for path in records
               if (board := board_record_read(path.stem)) and board_alive(board)]
    for board in running[max(settings.PLATFORM.board_max - 1, 0):]:
        logger.info("Stopping TensorBoard %s to make room for another", board.key)
        _stop(board)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(*, key: str, runs: dict[str, str]) -> Board:
    global _reaper
    token = secrets.token_urlsafe(32)
    platform_dir = Path(__file__).resolve().parents[3]  # platform/
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([str(platform_dir), str(platform_dir.parent)]),
           TOKEN_ENV: token}
    # No run folder yet (nothing trained): TensorBoard wants one, an empty one of ours.
    shown = runs or {"none": str(_folder() / "empty")}
    Path(shown.get("none", _folder())).mkdir(mode=0o700, exist_ok=True)
    for attempt in range(3):  # a port taken between the probe and the bind: another one
        port = _free_port()
        argv = [sys.executable, "-m", "tfplatform.experiments.boards.host", "--port", str(port),
                "--path-prefix", f"{URL_PREFIX}/{key}",
                *(f"--run={name}={folder}" for name, folder in shown.items())]
        if not settings.PLATFORM.board_confine:
            argv.append("--no-confine")
        log = (_folder() / f"{key}.log").open("wb")
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
                                 cwd=_folder())
        log.close()
        board = Board(key=key, port=port, token=token, pid=child.pid, runs=runs)
        if _ready(board=board, child=child):
            break
        child.kill()
        child.wait()
        logger.warning("TensorBoard %s did not start (attempt %d): %s", key, attempt + 1,
                       (_folder() / f"{key}.log").read_text(errors="replace")[-2000:])
    else:
        raise Unavailable("TensorBoard could not be started; try again in a moment.")
    with _children_lock:
        _children[key] = child
        if _reaper is None:
            _reaper = threading.Thread(target=_reap_forever, name="tensorboard-reaper",
                                       daemon=True)
            _reaper.start()
    path = _record_path(key)
    staged = path.with_suffix(f".{os.getpid()}.tmp")
    private_write_text(path=staged, text=json.dumps(asdict(board)))  # it holds the token
    staged.replace(path)
    return board


def _ready(*, board: Board, child: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + START_SECONDS
    url = f"http://127.0.0.1:{board.port}{board.path}data/environment"
    while time.monotonic() < deadline and child.poll() is None:
        try:
            answer = _session.get(url, headers={"X-Tfplatform-Board": board.token}, timeout=2)
            if answer.status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return False


def _reap_forever() -> None:
    while True:
        time.sleep(min(60.0, settings.PLATFORM.board_idle_seconds / 2))
        try:
            for key in boards_reap(idle_seconds=settings.PLATFORM.board_idle_seconds):
                logger.info("Stopped idle TensorBoard %s", key)
        except Exception:  # the reaper must outlive one bad record
            logger.exception("TensorBoard reaper")
