"""The one place the platform talks to the model server (embedded or tensorflow/serving)."""

from functools import lru_cache
from pathlib import Path

from django.conf import settings
from google.protobuf import text_format

from serving.client import ModelEntry, ModelServerClient, model_server_config
from serving.metrics import MonitoringOptions, monitoring_config_text

LOAD_TIMEOUT_SECONDS = 120.0


def model_server_client() -> ModelServerClient:
    """A process-wide client: its gRPC channel and HTTP connection pool are reused."""
    return _client(settings.PLATFORM.tf_serving_grpc, settings.PLATFORM.tf_serving_rest,
                   settings.PLATFORM.tf_serving_access_token)


def front_client() -> ModelServerClient:
    """The front's (the embedded server itself unless a gateway stands in front of TF
    Serving): where the access table is pushed."""
    config = settings.PLATFORM
    if not (config.tf_serving_front_rest or config.tf_serving_front_grpc):
        return model_server_client()
    return _client(config.tf_serving_front_grpc or config.tf_serving_grpc,
                   config.tf_serving_front_rest or config.tf_serving_rest,
                   config.tf_serving_access_token)


@lru_cache(maxsize=4)
def _client(grpc_target: str, rest_url: str, access_token: str) -> ModelServerClient:
    return ModelServerClient(grpc_target=grpc_target, rest_url=rest_url,
                             access_token=access_token)


def model_config_write(*, entries: list[ModelEntry], path: Path) -> None:
    """Keep the config file equal to what the server was told, so a restart serves the same."""
    text = text_format.MessageToString(model_server_config(entries))
    staging = path.with_suffix(".tmp")
    staging.write_text(text or "model_config_list {\n}\n")
    staging.replace(path)



def monitoring_config_write(*, path: Path, metrics_path: str) -> None:
    """The embedded server's --monitoring_config_file: Prometheus on at `metrics_path`."""
    options = MonitoringOptions(prometheus=True, path=metrics_path)
    staging = path.with_suffix(".tmp")
    staging.write_text(monitoring_config_text(options))
    staging.replace(path)
