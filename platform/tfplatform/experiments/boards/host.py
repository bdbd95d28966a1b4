"""One TensorBoard process of the platform: `python -m tfplatform.experiments.boards.host`.

Started by `boards/registry.py` for one set of experiments, never by hand; no Django here.
It serves TensorBoard's own WSGI app (a maintained `tensorboard` release, Python data loading,
TensorFlow's stub instead of TensorFlow: no import of TF, a small process) on 127.0.0.1 and

- answers only requests carrying its token (`X-Tfplatform-Board`, the value of the
  TFPLATFORM_BOARD_TOKEN variable it was started with, never on its command line): another
  process of the host that finds the port gets 403, so the platform's proxy, which checks who may
  see the experiments, is the one way in;
- confines itself with Landlock (`serving/confine.py`, over `confinement/`, as the embedded
  model server) before any thread starts: it reads only the runs' folders and the Python
  runtime, writes nothing, binds only its port and connects nowhere. The event files were
  written by user code: a link planted in a run folder, or a projector config naming another
  file, leads nowhere readable;
- shows the trials' profiler traces in its Profile tab (`boards/profile.py`: these runs' traces
  only; no capture, no other folder);
- ends when the process that started it ends (its stdin, a pipe from it, reaches EOF) or on
  SIGTERM.

    --port N --path-prefix /tensorboard/KEY --run NAME=DIR [--run ...] [--no-confine]
"""

from __future__ import annotations

import argparse
import hmac
import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

TOKEN_ENV = "TFPLATFORM_BOARD_TOKEN"  # noqa: S105 - the variable's name, not a token
# X-Tfplatform-Board, as WSGI names it
TOKEN_HEADER = "HTTP_X_TFPLATFORM_BOARD"  # noqa: S105
RELOAD_SECONDS = 5

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def token_guard(*, app: WsgiApp, token: str) -> WsgiApp:
    """TensorBoard's app, for callers that know the token; 403 for anyone else."""
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = str(environ.get(TOKEN_HEADER, "")).encode()
        if not hmac.compare_digest(given, expected):
            start_response("403 Forbidden", [("Content-Type", "text/plain"),
                                             ("Content-Length", "10")])
            return [b"Forbidden\n"]
        return app(environ, start_response)

    return guarded


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="board_host")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path-prefix", required=True)
    parser.add_argument("--run", action="append", default=[], help="NAME=DIR")
    parser.add_argument("--no-confine", dest="confine", action="store_false")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = _arguments(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"{TOKEN_ENV} is not set")
    runs = dict(run.split("=", 1) for run in args.run)
    # TensorFlow's stub, not TensorFlow: local files are all it reads (tensorboard.compat.tf).
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    # Nor for xprof, which imports it if it can, for the capture the board refuses.
    sys.modules["tensorflow"] = None  # type: ignore[assignment]
    from tensorboard import program

    _links_unlisted()
    def server(app: WsgiApp, flags: Any) -> Any:
        return program.WerkzeugServer(token_guard(app=app, token=token), flags)

    board = program.TensorBoard(plugins=_plugins(runs=runs), server_class=server)
    board.configure(argv=[
        "", "--logdir_spec", ",".join(f"{name}:{path}" for name, path in runs.items()),
        "--host", "127.0.0.1", "--port", str(args.port), "--path_prefix", args.path_prefix,
        "--load_fast", "false", "--reload_interval", str(RELOAD_SECONDS),
        "--window_title", "TensorBoard",
    ])
    if args.confine:
        from confinement import confined_fork
        from serving.confine import server_confine

        confined_fork()  # Landlock binds only the calling thread: confine the only one
        server_confine(read=tuple(runs.values()), ports=(args.port,))
    board.launch()  # its threads (server, reloads) start confined
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"serving on 127.0.0.1:{args.port}", flush=True)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    signal.pause()


def _plugins(*, runs: dict[str, str]) -> list[Any]:
    """TensorBoard's plugins, bundled and installed (the projector, xprof), but xprof's own
    ProfilePlugin, which reads any folder a request names and captures from any address: where
    xprof imports, the Profile tab is the board's (`boards/profile.py`), over these runs' traces."""
    from tensorboard import default

    plugins = [plugin for plugin in default.get_plugins()
               if not getattr(plugin, "__module__", "").startswith("xprof.")]
    try:
        from tfplatform.experiments.boards.profile import BoardProfileLoader
    except ImportError as error:  # TensorBoard's notice that the plugin is missing, then
        print(f"Profile tab not served: xprof does not import ({error})", flush=True)
        return plugins
    return [*plugins, BoardProfileLoader(runs=runs)]


def _links_unlisted() -> None:
    """Folders list without their links, and a folder it may not read lists empty: a link a trial
    planted is skipped instead of stopping TensorBoard's loading of every run (Landlock would
    refuse to follow it anyway)."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    listdir = gfile.LocalFileSystem.listdir

    def unlinked(self: Any, dirname: Any) -> list[str]:
        try:
            entries: list[str] = listdir(self, dirname)
        except PermissionError:
            return []
        folder = os.fsdecode(dirname)
        return [entry for entry in entries if not os.path.islink(os.path.join(folder, entry))]

    gfile.LocalFileSystem.listdir = unlinked


def _exit_with_parent() -> None:
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
