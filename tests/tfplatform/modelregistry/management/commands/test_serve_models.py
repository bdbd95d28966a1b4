"""`manage.py serve_models`: the embedded server's command line follows the platform's settings."""

from pathlib import Path
from typing import Any

from serving.flags import options_from_args
from serving.flags import parser as flag_parser
from serving.server import ServerOptions
from tfplatform.modelregistry.management.commands.serve_models import serve_models_argv


def _options(argv: list[str]) -> ServerOptions:
    assert argv[1:3] == ["-m", "serving"]
    return options_from_args(flag_parser().parse_args(argv[3:]))[0]


def _platform(settings: Any, **values: object) -> None:
    settings.PLATFORM = {**settings.PLATFORM, "TF_SERVING_GRPC": "127.0.0.1:9500",
                         "TF_SERVING_REST": "http://127.0.0.1:9501", **values}


def test_defaults_leave_the_session_thread_pools_to_tensorflow(
    settings: Any, tmp_path: Path
) -> None:
    _platform(settings, TF_SERVING_BATCHING_PARAMETERS_FILE="",
              TF_SERVING_INTRA_OP_PARALLELISM=0, TF_SERVING_INTER_OP_PARALLELISM=0)
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert (options.grpc_port, options.rest_api_port, options.host) == (9500, 9501, "127.0.0.1")
    assert options.batching is not None  # --enable_batching with TF Serving's default parameters
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == (0, 0)


def test_batching_file_and_session_threads_reach_the_server(
    settings: Any, tmp_path: Path
) -> None:
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 8 }\nnum_batch_threads { value: 3 }\n")
    _platform(settings, TF_SERVING_BATCHING_PARAMETERS_FILE=str(batching),
              TF_SERVING_INTRA_OP_PARALLELISM=1, TF_SERVING_INTER_OP_PARALLELISM=-1)
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.batching is not None
    assert (options.batching.max_batch_size, options.batching.num_batch_threads) == (8, 3)
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == (1, -1)


def test_monitoring_and_warmup_are_on_by_default(settings: Any, tmp_path: Path) -> None:
    _platform(settings, TF_SERVING_METRICS_PATH="/monitoring/prometheus/metrics")
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.monitoring.prometheus
    assert options.monitoring.path == "/monitoring/prometheus/metrics"
    assert options.enable_model_warmup  # TF Serving's default, kept
    assert (tmp_path / "monitoring.config").is_file()


def test_no_metrics_path_no_monitoring(settings: Any, tmp_path: Path) -> None:
    _platform(settings, TF_SERVING_METRICS_PATH="")
    argv = serve_models_argv(config=tmp_path / "models.config")
    assert not any(flag.startswith("--monitoring_config_file") for flag in argv)
    assert not _options(argv).monitoring.prometheus


def test_profiler_and_tflite_follow_the_settings(settings: Any, tmp_path: Path) -> None:
    _platform(settings, TF_SERVING_PROFILER_DIR="")
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert not options.enable_profiler
    assert options.prefer_tflite_model  # only the platform's converter writes a model.tflite
    _platform(settings, TF_SERVING_PROFILER_DIR=str(tmp_path / "profiles"))
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.enable_profiler
    assert options.profiler_write_root == str(tmp_path / "profiles")
