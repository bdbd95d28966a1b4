"""tensorflow_model_server's command line, so scripts written for TF Serving start us unchanged.

Every flag of tensorflow_model_server is accepted; the ones that only tune TF Serving internals
(thread pools, TPU, TF Lite pools, SSL) are logged and ignored.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from confinement import confined_fork
from serving.access import access_token_from_env
from serving.config import BatchingOptions, parse_batching_parameters, single_model_config
from serving.errors import ServingError
from serving.metrics import MonitoringOptions, monitoring_config_read
from serving.server import ModelServer, ServerOptions

log = logging.getLogger("serving")

_IGNORED = (
    "rest_api_num_threads",
    "enable_per_model_batching_parameters",
    "num_load_threads",
    "num_unload_threads",
    "max_num_load_retries",
    "load_retry_interval_micros",
    "flush_filesystem_caches",
    "use_alts_credentials",
    "ssl_config_file",
    "platform_config_file",
    "tensorflow_session_config_file",
    "per_process_gpu_memory_fraction",
    "remove_unused_fields_from_bundle_metagraph",
    "num_tflite_pools",
    "num_tflite_interpreters_per_pool",
    "thread_pool_factory_config_file",
    "mixed_precision",
    "skip_initialize_tpu",
    "enable_grpc_healthcheck_service",
    "enable_serialization_as_tensor_content",
    "xla_cpu_compilation_enabled",
    "xla_gpu_compilation_enabled",
)
_VERSION = "2.21.0 (embedded, serving/ package)"


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorflow_model_server", allow_abbrev=False)

    def flag(name: str, kind: type = str, default: object = None) -> None:
        if kind is bool:
            parser.add_argument(
                f"--{name}", type=_bool, nargs="?", const=True, default=bool(default)
            )
        else:
            parser.add_argument(f"--{name}", type=kind, default=default)

    flag("port", int, 8500)
    flag("grpc_socket_path", str, "")
    flag("rest_api_port", int, 0)
    flag("rest_api_timeout_in_ms", int, 30000)
    flag("rest_api_enable_cors_support", bool)
    flag("enable_batching", bool)
    flag("batching_parameters_file", str, "")
    flag("allow_version_labels_for_unavailable_models", bool)
    flag("model_config_file", str, "")
    flag("model_config_file_poll_wait_seconds", int, 0)
    flag("model_name", str, "default")
    flag("model_base_path", str, "")
    flag("file_system_poll_wait_seconds", int, 1)
    flag("tensorflow_session_parallelism", int, 0)
    flag("tensorflow_intra_op_parallelism", int, 0)
    flag("tensorflow_inter_op_parallelism", int, 0)
    flag("saved_model_tags", str, "serve")
    flag("grpc_max_threads", int, 0)
    flag("enable_signature_method_name_check", bool)
    flag("grpc_channel_arguments", str, "")
    flag("version", bool)
    flag("enable_model_warmup", bool, True)
    flag("num_request_iterations_for_warmup", int, 1)
    flag("monitoring_config_file", str, "")
    flag("enable_profiler", bool, True)
    # Not a TF Serving flag: the only directory profiler requests may write traces under (and,
    # with --confine_read_paths, the only one the server may write at all); see profiler.py.
    flag("profiler_write_root", str, "")
    flag("prefer_tflite_model", bool)
    # Not a TF Serving flag (it always binds all interfaces): lets tests stay on loopback.
    flag("host", str, "0.0.0.0")  # noqa: S104
    # Not a TF Serving flag: before any model loads, restrict the server with Landlock to reading
    # these comma-separated paths (the model base path), its flag files and the Python runtime,
    # binding its own ports and connecting nowhere (confine.py).
    flag("confine_read_paths", str, "")
    # Not a TF Serving flag: when positive, platform users call the server with their own API
    # tokens, checked against the access table the platform pushes, which is trusted this many
    # seconds after a push (front.py). Needs the server's access token.
    flag("platform_access_max_age_seconds", float, 0.0)
    for name in _IGNORED:
        parser.add_argument(f"--{name}", nargs="?", const="true", default=None)
    return parser


def _session_parallelism(args: argparse.Namespace) -> tuple[int, int]:
    """(intra-op, inter-op) threads, chosen as TF Serving's server.cc chooses them: both as given
    when either is positive, else tensorflow_session_parallelism for both. 0 lets TensorFlow
    pick; a negative inter-op count runs a request's ops in the thread that serves it."""
    intra, inter = args.tensorflow_intra_op_parallelism, args.tensorflow_inter_op_parallelism
    session = args.tensorflow_session_parallelism
    if intra > 0 and inter > 0 and session > 0:
        raise ValueError(
            "Either configure server_options.tensorflow_session_parallelism or "
            "(server_options.tensorflow_intra_op_parallelism, "
            "server_options.tensorflow_inter_op_parallelism) separately. "
            "You cannot configure all."
        )
    if intra > 0 or inter > 0:
        return intra, inter
    return session, session


def channel_arguments_parse(text: str) -> tuple[tuple[str, str | int], ...]:
    """TF Serving's --grpc_channel_arguments: `key=value,...`; integer values stay integers."""
    parsed: list[tuple[str, str | int]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--grpc_channel_arguments: expected key=value, got {item!r}")
        parsed.append((key, int(value) if value.lstrip("-").isdigit() else value))
    return tuple(parsed)


def options_from_args(args: argparse.Namespace, *, access_token: str | None = None
                      ) -> tuple[ServerOptions, ModelServer]:
    """Validates like Server::BuildAndStart and builds the server (not started). The access
    token, if not given, from the environment (access.py)."""
    if args.port == 0 and not args.grpc_socket_path:
        raise ValueError(
            "At least one of server_options.grpc_port or server_options.grpc_socket_path "
            "must be set."
        )
    if not args.model_base_path and not args.model_config_file:
        raise ValueError(
            "Both server_options.model_base_path and server_options.model_config_file are empty!"
        )
    token = access_token_from_env() if access_token is None else access_token
    if args.platform_access_max_age_seconds > 0 and not token:
        raise ValueError("--platform_access_max_age_seconds needs the server's access token.")
    batching: BatchingOptions | None = None
    if args.enable_batching:
        batching = BatchingOptions()
        if args.batching_parameters_file:
            batching = parse_batching_parameters(Path(args.batching_parameters_file).read_text())
    elif args.batching_parameters_file:
        raise ValueError(
            "server_options.batching_parameters_file is set without setting "
            "server_options.enable_batching to true."
        )
    intra, inter = _session_parallelism(args)
    monitoring = MonitoringOptions()
    if args.monitoring_config_file:
        monitoring = monitoring_config_read(Path(args.monitoring_config_file))
    extra = {name: value for name in _IGNORED if (value := getattr(args, name)) is not None}
    for name in extra:
        log.warning("--%s is accepted for compatibility and ignored", name)
    defaults = ServerOptions()
    options = ServerOptions(
        grpc_port=args.port or None,
        rest_api_port=args.rest_api_port or None,
        host=args.host,
        grpc_socket_path=args.grpc_socket_path,
        grpc_max_threads=args.grpc_max_threads or defaults.grpc_max_threads,
        rest_api_timeout_in_ms=args.rest_api_timeout_in_ms,
        rest_api_enable_cors_support=args.rest_api_enable_cors_support,
        batching=batching,
        file_system_poll_wait_seconds=args.file_system_poll_wait_seconds,
        model_config_file_poll_wait_seconds=args.model_config_file_poll_wait_seconds,
        allow_version_labels_for_unavailable_models=(
            args.allow_version_labels_for_unavailable_models
        ),
        enable_signature_method_name_check=args.enable_signature_method_name_check,
        saved_model_tags=tuple(t for t in args.saved_model_tags.split(",") if t),
        intra_op_parallelism=intra,
        inter_op_parallelism=inter,
        grpc_channel_arguments=channel_arguments_parse(args.grpc_channel_arguments),
        access_token=token,
        front_max_age_seconds=args.platform_access_max_age_seconds,
        enable_model_warmup=args.enable_model_warmup,
        num_request_iterations_for_warmup=args.num_request_iterations_for_warmup,
        monitoring=monitoring,
        enable_profiler=args.enable_profiler,
        profiler_write_root=args.profiler_write_root,
        prefer_tflite_model=args.prefer_tflite_model,
        extra=extra,
    )
    if args.model_config_file:
        server = ModelServer(options=options, model_config_file=Path(args.model_config_file))
    else:
        config = single_model_config(name=args.model_name, base_path=args.model_base_path)
        server = ModelServer(options=options, config=config)
    return options, server


def _confine(args: argparse.Namespace) -> None:
    from serving.confine import server_confine

    ports = (args.port, args.rest_api_port)
    if 0 in ports:
        raise ValueError("--confine_read_paths needs both --port and --rest_api_port set.")
    files = (args.model_config_file, args.batching_parameters_file, args.monitoring_config_file)
    read = tuple(p for p in args.confine_read_paths.split(",") if p)
    write = (args.profiler_write_root,) if args.enable_profiler and args.profiler_write_root else ()
    server_confine(read=read + tuple(f for f in files if f), ports=ports, write=write)
    log.info("Confined to reading %s", ", ".join(read))


def run(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s"
    )
    logging.getLogger("tensorflow").propagate = False  # TF's logger has its own handler
    args = parser().parse_args(argv)
    if args.version:
        print(f"TensorFlow ModelServer: {_VERSION}")
        return 0
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only record it: locks, logging and thread joins are unsafe inside a signal handler.
        received.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # Before confinement: a token file is out of the confined server's (and its models')
        # reach.
        token = access_token_from_env()
        if args.confine_read_paths:
            # TensorFlow and NumPy left threads behind when they loaded, which Landlock would
            # not bind: the server runs in a fork, this process' only thread, confined.
            confined_fork()
            _confine(args)
        _, server = options_from_args(args, access_token=token)
        server.start()
    except (ValueError, OSError, ServingError) as exc:
        log.error("%s", exc)
        return 1
    while not received:
        time.sleep(0.2)
    log.info("Received signal %d, shutting down", received[0])
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(run())
