import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand

from serving.access import TOKEN_FILE_ENV, access_token_file_write
from serving.environment import model_process_env
from tfplatform.modelregistry.selectors.access import serving_front_on
from tfplatform.modelregistry.server import monitoring_config_write
from tfplatform.modelregistry.services.sync import model_config_ensure


class Command(BaseCommand):
    help = "Start the embedded TF Serving-compatible model server on the configured ports."

    def handle(self, *args: Any, **options: Any) -> None:
        config = model_config_ensure()
        argv = serve_models_argv(config=config)
        self.stdout.write(
            f"Model server: gRPC {settings.PLATFORM.tf_serving_grpc}, REST "
            f"{settings.PLATFORM.tf_serving_rest}, config {config}"
        )
        sys.stdout.flush()
        # Replace this process so signals from the process manager reach the server directly.
        os.execve(sys.executable, argv, serve_models_env())  # noqa: S606 - argv is ours


def serve_models_env() -> dict[str, str]:
    """The server's environment: allow-listed (a model it serves can read it back). Its access
    token is in a file of the owner's only, outside what the confined server may read, that it
    reads once at start: never argv (every local user can read /proc/<pid>/cmdline) nor the
    environment (the server's models could read /proc/self/environ)."""
    token_file = Path(settings.VAR_DIR) / "model-server-token"
    access_token_file_write(path=str(token_file),
                            token=settings.PLATFORM.tf_serving_access_token)
    return model_process_env(extra={TOKEN_FILE_ENV: str(token_file)})


def serve_models_argv(*, config: Path) -> list[str]:
    """The embedded server's command line, from the platform's settings. Writes its monitoring
    config beside `config`: Prometheus on at TF_SERVING_METRICS_PATH, which the scheduler
    scrapes (with the access token, which the endpoint requires like every other path)."""
    grpc_port = settings.PLATFORM.tf_serving_grpc.rsplit(":", 1)[1]
    rest_port = urlparse(settings.PLATFORM.tf_serving_rest).port or 8501
    max_message = settings.PLATFORM.tf_serving_grpc_max_message_bytes
    argv = [
        sys.executable,
        "-m",
        "serving",
        f"--port={grpc_port}",
        f"--rest_api_port={rest_port}",
        f"--model_config_file={config}",
        "--enable_batching",
        # The config names labels; at start-up their versions are not loaded yet.
        "--allow_version_labels_for_unavailable_models",
        # Embedded serving is for this machine only; compose uses tensorflow/serving.
        "--host=127.0.0.1",
        f"--grpc_channel_arguments=grpc.max_receive_message_length={max_message}",
        # Only the platform's converter puts a model.tflite in a version (deployed with
        # `tflite`), and such a version is served by it.
        "--prefer_tflite_model",
    ]
    if settings.PLATFORM.model_server_confine:
        # A model is a program: it gets the models, never var/ (database, secret key, uploads).
        argv.append(f"--confine_read_paths={settings.PLATFORM.model_base_path}")
    metrics_path = settings.PLATFORM.tf_serving_metrics_path
    if metrics_path:
        monitoring = config.with_name("monitoring.config")
        monitoring_config_write(path=monitoring, metrics_path=metrics_path)
        argv.append(f"--monitoring_config_file={monitoring}")
    if serving_front_on():
        # Users call it with their own tokens too, against what the platform pushes.
        argv.append("--platform_access_max_age_seconds="
                    f"{settings.PLATFORM.tf_serving_front_max_age_seconds}")
    profiles = settings.PLATFORM.tf_serving_profiler_dir
    # Profile writes where its request says: only ever below this directory, and nowhere at all
    # without one (a confined server could not write it anyway).
    argv.append(f"--profiler_write_root={profiles}" if profiles else "--enable_profiler=false")
    batching = settings.PLATFORM.tf_serving_batching_parameters_file
    if batching:
        argv.append(f"--batching_parameters_file={batching}")
    intra = settings.PLATFORM.tf_serving_intra_op_parallelism
    inter = settings.PLATFORM.tf_serving_inter_op_parallelism
    if intra or inter:
        argv += [f"--tensorflow_intra_op_parallelism={intra}",
                 f"--tensorflow_inter_op_parallelism={inter}"]
    return argv
