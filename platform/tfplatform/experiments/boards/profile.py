"""The Profile tab of a platform TensorBoard (`boards/host.py`): trials' profiler traces, read-only.

A trial asked for a trace (`profile_steps`, `training/board_layout.py`) leaves it in
`<work_dir>/tensorboard/plugins/profile/<profile run>/<host>.xplane.pb`. xprof's ProfilePlugin
(`tensorboard-plugin-profile`) shows such traces, but as it comes it

- reads one `--logdir`, while a board serves named runs (`--logdir_spec`), so it finds nothing;
- takes any folder a request names (`session_path`, `run_path` query parameters, and
  `generate_cache`'s `session_path`) and reads the traces there;
- makes the process connect to any gRPC address a request names (`capture_profile`);
- writes caches into the run folders (`.cached_tools.json`, the cache version file).

The board's plugin below is xprof's, bound to the board's own runs: its profile runs are the
folders in each run's `plugins/profile/` (links left out), named `<board run>/<profile run>`, and
are all a request can name; the request's folders are ignored, capture and cache generation are
refused (403) without being attempted, and nothing is written. It serves an explicit list of
xprof's routes, so a route a later xprof adds is not served until it is looked at. The traces
were written by user code: xprof's converter parses them inside the confined process (Landlock:
reads its runs only, writes nothing, connects nowhere), which holds should one be crafted.

No Django here, and no TensorFlow: xprof imports TensorFlow if it can (for TPU name
resolution, which capture alone uses); `board_host` hides it first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tensorboard import errors
from tensorboard.plugins import base_plugin
from werkzeug import wrappers
from xprof import profile_plugin as xprof
from xprof.convert import raw_to_tool_data

PROFILE_FOLDER = ("plugins", "profile")
# What xprof's converter makes of a CPU or GPU trace without writing anything (in xprof's order):
# its streaming trace viewer (`trace_viewer@`) and the HLO tools need files written beside it.
BOARD_TOOLS = ("overview_page", "trace_viewer", "op_profile", "input_pipeline_analyzer",
               "kernel_stats", "memory_profile", "roofline_model", "framework_op_stats",
               "hlo_stats")
REFUSED = ("Not on the platform: a board shows the profiler traces its experiments' trials wrote "
           "(hyperparameter profile_steps); it captures none and reads no other folder.")


def profile_runs(*, folder: str) -> list[str]:
    """The profile runs of a board run: the folders (not links) in its `plugins/profile/`."""
    root = os.path.join(folder, *PROFILE_FOLDER)
    try:
        with os.scandir(root) as entries:
            return sorted(entry.name for entry in entries
                          if not entry.is_symlink() and entry.is_dir(follow_symlinks=False))
    except OSError:  # none yet, or unreadable
        return []


def _tool_data_fresh(paths: Sequence[Any], tool: str, params: dict[str, Any]) -> Any:
    """xprof's converter, never asked to use a result it saved: results saved in a run folder
    would be the trial's files, and the board saves none (it writes nothing)."""
    return raw_to_tool_data.xspace_to_tool_data(paths, tool, {**params,
                                                              "use_saved_result": False})


def _refused(request: wrappers.Request) -> wrappers.Response:
    return xprof.respond({"error": REFUSED}, "application/json", code=403)


class BoardProfilePlugin(xprof.ProfilePlugin):
    """xprof's ProfilePlugin over a board's runs only: `runs` maps run name to folder."""

    def __init__(self, context: base_plugin.TBContext, *, runs: Mapping[str, str]) -> None:
        super().__init__(context, xspace_to_tool_data_fn=_tool_data_fresh)
        self._board_runs = dict(runs)
        self.hide_capture_profile_button = True  # the page offers no capture either

    def get_plugin_apps(self) -> dict[str, Callable[..., Any]]:
        served = {
            xprof.BASE_ROUTE: self.default_handler,
            xprof.LOCAL_ROUTE: self.default_handler,
            xprof.CONFIG_ROUTE: self.config_route,
            xprof.VERSION_ROUTE: xprof.version_route,
            xprof.RUNS_ROUTE: self.runs_route,
            xprof.RUN_TOOLS_ROUTE: self.run_tools_route,
            xprof.HOSTS_ROUTE: self.hosts_route,
            xprof.DATA_ROUTE: self.data_route,
            xprof.DATA_CSV_ROUTE: self.data_csv_route,
            xprof.HLO_MODULE_LIST_ROUTE: self.hlo_module_list_route,
            xprof.CAPTURE_ROUTE: wrappers.Request.application(_refused),
            xprof.GENERATE_CACHE_ROUTE: wrappers.Request.application(_refused),
        }
        for route in (xprof.INDEX_JS_ROUTE, xprof.INDEX_HTML_ROUTE, xprof.BUNDLE_JS_ROUTE,
                      xprof.STYLES_CSS_ROUTE, xprof.MATERIALICONS_WOFF2_ROUTE,
                      xprof.MATERIAL_SYMBOLS_WOFF2_ROUTE, xprof.TRACE_VIEWER_INDEX_HTML_ROUTE,
                      xprof.TRACE_VIEWER_INDEX_JS_ROUTE, xprof.TRACE_VIEWER_V2_JS_ROUTE,
                      xprof.TRACE_VIEWER_V2_WASM_ROUTE, xprof.ZONE_JS_ROUTE,
                      xprof.RUNTIME_JS_ROUTE):
            served[route] = self.static_file_route
        return served

    def is_active(self) -> bool:
        return any(self.generate_runs())  # not cached: a trace may appear while it runs

    def generate_runs(self) -> Iterator[str]:
        for name, folder in sorted(self._board_runs.items()):
            for profile in profile_runs(folder=folder):
                yield f"{name}/{profile}"

    def _session_dir_by_run_name_from_request(self, request: Any = None) -> None:
        """A request names runs, never folders: `session_path` and `run_path` are ignored."""
        return None

    def _run_dir(self, run: str | None, request: Any = None) -> str:
        name, _, profile = (run or "").rpartition("/")
        folder = self._board_runs.get(name)
        if folder is None or profile not in profile_runs(folder=folder):
            raise errors.NotFoundError(f"No profile run {run!r} on this board.")
        return os.path.join(folder, *PROFILE_FOLDER, profile)

    def generate_tools_of_run(self, run: str, run_dir: str) -> Iterator[str]:
        """BOARD_TOOLS for a run with a trace. Not xprof's own listing: its ToolsCache reads a
        cache file from the run folder (the trial's to plant) and writes one there, and its
        converter lists tools by writing the trace's HLO modules beside it, which the confined
        board cannot (the list came back empty)."""
        if self._get_xplane_basenames(run_dir):
            yield from BOARD_TOOLS

    def _get_all_basenames(self, path_str: str) -> list[str]:
        return _unlinked(folder=path_str, names=super()._get_all_basenames(path_str))

    def _get_xplane_basenames(self, path_str: str) -> list[str]:
        return _unlinked(folder=path_str, names=super()._get_xplane_basenames(path_str))

    def _write_cache_version_file(self, run_dir: str) -> None:
        """The board writes nothing (Landlock would refuse it anyway)."""

    def capture_route_impl(self, request: wrappers.Request) -> wrappers.Response:
        return _refused(request)

    def _generate_cache_impl(self, request: wrappers.Request) -> wrappers.Response:
        return _refused(request)


def _unlinked(*, folder: str, names: Sequence[str]) -> list[str]:
    """A trace file that is a link (to another run's, or any file) is not one of this run's."""
    return [name for name in names if not os.path.islink(os.path.join(folder, name))]


class BoardProfileLoader(base_plugin.TBLoader):
    """Builds the board's profile plugin for its runs; `master_tpu_unsecure_channel`, the flag
    xprof's plugin reads, is defined here as xprof's own loader does (and left empty)."""

    def __init__(self, *, runs: Mapping[str, str]) -> None:
        self._runs = dict(runs)

    def define_flags(self, parser: Any) -> None:
        parser.add_argument_group("profile plugin").add_argument(
            "--master_tpu_unsecure_channel", metavar="ADDR", type=str, default="")

    def load(self, context: base_plugin.TBContext) -> BoardProfilePlugin:
        return BoardProfilePlugin(context, runs=self._runs)
