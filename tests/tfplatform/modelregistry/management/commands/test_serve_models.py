"""`manage.py serve_models`: the embedded server's command line follows the platform's settings."""

from pathlib import Path
from typing import Any

import pytest

from serving.flags import options_from_args
from serving.flags import parser as flag_parser
from serving.server import ServerOptions
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.modelregistry.management.commands.serve_models import serve_models_argv


def _options(argv: list[str]) -> ServerOptions:
    assert argv[1:3] == ["-m", "serving"]
    return options_from_args(flag_parser().parse_args(argv[3:]))[0]


def _platform(override: PlatformSettingsOverride, **values: object) -> None:
    override(tf_serving_grpc="127.0.0.1:9500", tf_serving_rest="http://127.0.0.1:9501", **values)


def test_defaults_leave_the_session_thread_pools_to_tensorflow(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    _platform(platform_settings_override, tf_serving_batching_parameters_file="",
              tf_serving_intra_op_parallelism=0, tf_serving_inter_op_parallelism=0)
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert (options.grpc_port, options.rest_api_port, options.host) == (9500, 9501, "127.0.0.1")
    assert options.batching is not None  # --enable_batching with TF Serving's default parameters
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == (0, 0)


def test_batching_file_and_session_threads_reach_the_server(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 8 }\nnum_batch_threads { value: 3 }\n")
    _platform(platform_settings_override, tf_serving_batching_parameters_file=str(batching),
              tf_serving_intra_op_parallelism=1, tf_serving_inter_op_parallelism=-1)
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.batching is not None
    assert (options.batching.max_batch_size, options.batching.num_batch_threads) == (8, 3)
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == (1, -1)


def test_monitoring_and_warmup_are_on_by_default(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    _platform(platform_settings_override, tf_serving_metrics_path="/monitoring/prometheus/metrics")
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.monitoring.prometheus
    assert options.monitoring.path == "/monitoring/prometheus/metrics"
    assert options.enable_model_warmup  # TF Serving's default, kept
    assert (tmp_path / "monitoring.config").is_file()


def test_no_metrics_path_no_monitoring(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    _platform(platform_settings_override, tf_serving_metrics_path="")
    argv = serve_models_argv(config=tmp_path / "models.config")
    assert not any(flag.startswith("--monitoring_config_file") for flag in argv)
    assert not _options(argv).monitoring.prometheus


def test_profiler_and_tflite_follow_the_settings(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    _platform(platform_settings_override, tf_serving_profiler_dir="")
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert not options.enable_profiler
    assert options.prefer_tflite_model  # only the platform's converter writes a model.tflite
    _platform(platform_settings_override, tf_serving_profiler_dir=str(tmp_path / "profiles"))
    options = _options(serve_models_argv(config=tmp_path / "models.config"))
    assert options.enable_profiler
    assert options.profiler_write_root == str(tmp_path / "profiles")


def test_the_front_follows_its_settings(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Path
) -> None:
    _platform(platform_settings_override, tf_serving_front_refresh_seconds=5.0,
              tf_serving_front_max_age_seconds=45.0)
    args = flag_parser().parse_args(serve_models_argv(config=tmp_path / "models.config")[3:])
    assert options_from_args(args, access_token="t")[0].front_max_age_seconds == 45.0
    with pytest.raises(ValueError, match="needs the server's access token"):
        options_from_args(args, access_token="")
    _platform(platform_settings_override, tf_serving_front_refresh_seconds=0.0)
    assert _options(serve_models_argv(config=tmp_path / "models.config")) \
        .front_max_age_seconds == 0.0


def test_the_server_loads_tensorflow_but_not_keras_or_scikit_learn(
    model_server_process: dict[str, Any],
) -> None:
    """TensorFlow imports Keras 3, and scikit-learn through it, for aliases a model server never
    uses unless told otherwise (serving/environment.py): a third of its start."""
    maps = Path(f"/proc/{model_server_process['pid']}/maps").read_text()
    assert "_pywrap_tensorflow_internal" in maps
    # Libraries only Keras 3 (optree) and scikit-learn load.
    assert "/optree/" not in maps and "/sklearn/" not in maps
