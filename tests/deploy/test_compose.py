"""docker-compose.yml is checked against the Compose spec's own schema (no Docker engine here)."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import get_commands

from tests.conftest import peer_data_or_skip

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
APP_SERVICES = ("migrate", "web", "lab", "model-loader", "notifier", "scheduler", "worker-cpu",
                "worker-gpu")


def test_compose_file_matches_compose_spec_schema() -> None:
    schema = json.loads((peer_data_or_skip() / "compose-spec" / "compose-spec.json").read_text())
    jsonschema.validate(COMPOSE, schema)


def test_has_every_platform_service() -> None:
    assert {"postgres", "redis", "tfserving", *APP_SERVICES} <= set(COMPOSE["services"])
    assert COMPOSE["services"]["tfserving"]["image"].startswith("tensorflow/serving:")


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_service_commands_exist_in_the_project(name: str) -> None:
    command = COMPOSE["services"][name]["command"]
    if command[0] == "gunicorn":
        module = command[-1].replace(".", "/") + ".py"
        assert (ROOT / "platform" / module).is_file()
    elif command[0] == "uvicorn":
        module = command[1].split(":")[0].replace(".", "/") + ".py"
        assert (ROOT / "platform" / module).is_file()
    else:
        assert command[:2] == ["python", "manage.py"]
        assert command[2] in get_commands(), f"{command[2]} is not a management command"


def test_every_service_has_a_health_check_and_internal_ports_stay_internal() -> None:
    for name, service in COMPOSE["services"].items():
        if name == "migrate":
            continue
        assert "healthcheck" in service, name
        published = " ".join(str(p) for p in service.get("ports", []))
        for internal in ("8500", "8501", "2222"):
            assert not re.search(rf"\b{internal}\b", published), f"{name} publishes {internal}"
    published = {name for name, service in COMPOSE["services"].items() if service.get("ports")}
    assert published == {"proxy"}  # the web app, Redis and PostgreSQL are reached inside only


def test_the_tls_proxy_is_shipped_and_is_the_one_proxy_the_web_app_trusts() -> None:
    """Without it the web app, told it sits behind TLS, would take a client's own
    X-Forwarded-Proto (and X-Forwarded-For) as the proxy's."""
    proxy = COMPOSE["services"]["proxy"]
    # 80 and 443 unless moved (PLATFORM_HTTP_PORT, PLATFORM_HTTPS_PORT), and the lab, below
    assert proxy["ports"][:2] == ["${PLATFORM_HTTP_PORT:-80}:80", "${PLATFORM_HTTPS_PORT:-443}:443"]
    [caddyfile] = [v.split(":")[0] for v in proxy["volumes"] if "Caddyfile" in v]
    config = (ROOT / caddyfile).read_text()
    assert re.search(r"^\s*reverse_proxy web:8000$", config, re.MULTILINE)
    assert "trusted_proxies" not in config  # Caddy replaces what clients send
    app = COMPOSE["x-app"]["environment"]
    assert app["DJANGO_BEHIND_TLS_PROXY"] == "true" and app["PLATFORM_NUM_PROXIES"] == "1"
    assert COMPOSE["services"]["web"]["expose"] == ["8000"]


def _caddy_sites() -> dict[str, str]:
    """The Caddyfile's site blocks by address, comments left out."""
    text = "\n".join(line for line in (ROOT / "deploy" / "Caddyfile").read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    # An environment placeholder, {$NAME:default}, is no block.
    placeholders = re.findall(r"\{\$[A-Z_]+(?::[^}]*)?\}", text)
    for index, placeholder in enumerate(placeholders):
        text = text.replace(placeholder, f"\0{index}\0", 1)
    sites, depth, block = {}, 0, ""
    for char in text:
        block += char
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "}" and depth == 0:
            address, _, body = block.partition("{")
            sites[address.strip()] = body
            block = ""
    for index, placeholder in enumerate(placeholders):
        sites = {k.replace(f"\0{index}\0", placeholder): v.replace(f"\0{index}\0", placeholder)
                 for k, v in sites.items()}
    return sites


def test_the_lab_is_served_on_an_origin_of_its_own_and_nothing_else_there() -> None:
    """Lab content must not share an origin with the platform's pages, which it could then read
    with the user's session: its own port of the same host (the platform's host-only session
    cookie still comes along; Jupyter's own cookies are dropped by the lab service)."""
    sites = _caddy_sites()
    platform = "{$PLATFORM_DOMAIN:localhost}"
    lab = f"{platform}:{{$PLATFORM_LAB_PORT:8443}}"
    grpc = f"{platform}:{{$PLATFORM_SERVING_GRPC_PORT:8543}}"  # the gateway's alone
    assert set(sites) == {platform, lab, grpc}
    assert "lab" not in sites[grpc] and "web:8000" not in sites[grpc]
    assert "lab:8001" not in sites[platform] and "/workspaces" not in sites[platform]
    assert re.search(r"@lab path_regexp \^/workspaces/\[0-9\]\+/lab\(/\.\*\)\?\$", sites[lab])
    assert re.search(r"handle @lab \{\s*reverse_proxy lab:8001\s*\}", sites[lab])
    assert re.search(r"handle \{\s*respond 404\s*\}", sites[lab])  # nothing else there
    assert "web:8000" not in sites[lab]
    proxy = COMPOSE["services"]["proxy"]
    port = "${PLATFORM_LAB_PORT:-8443}"
    assert proxy["ports"][2] == f"{port}:{port}"
    assert proxy["environment"]["PLATFORM_LAB_PORT"] == port
    app = COMPOSE["x-app"]["environment"]
    assert app["PLATFORM_WORKSPACE_LAB_ORIGIN"] == f"https://${{PLATFORM_DOMAIN:-localhost}}:{port}"
    # The platform trusts no state change from the lab's origin.
    assert app["PLATFORM_WORKSPACE_LAB_ORIGIN"] not in app["DJANGO_CSRF_TRUSTED_ORIGINS"]
    assert app["DJANGO_CSRF_TRUSTED_ORIGINS"] == "${DJANGO_CSRF_TRUSTED_ORIGINS:-https://localhost}"


def test_redis_demands_a_password_that_every_client_sends() -> None:
    redis = COMPOSE["services"]["redis"]
    assert redis["secrets"] == ["redis_password"]
    # The password is read from the secret's file as configuration, never put on a command line.
    script = redis["command"][-1]
    assert "requirepass $$(cat /run/secrets/redis_password)" in script
    assert script.startswith("exec redis-server - ")
    assert "/run/secrets/redis_password" in redis["healthcheck"]["test"][1]  # it signs in
    app = COMPOSE["x-app"]["environment"]
    assert app["REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password"
    for url in (app["CELERY_BROKER_URL"], app["CACHE_URL"]):
        assert url.split("://", 1)[1].startswith("redis:6379/")


SECRETS = {"DJANGO_SECRET_KEY": "django_secret_key", "POSTGRES_PASSWORD": "postgres_password",
           "REDIS_PASSWORD": "redis_password", "TF_SERVING_ACCESS_TOKEN": "serving_access_token"}


def test_secrets_reach_the_services_as_files_only_and_compose_refuses_to_start_without() -> None:
    assert {COMPOSE["secrets"][name]["environment"] for name in SECRETS.values()} == set(SECRETS)
    for variable in SECRETS:
        assert f"${{{variable}:?set {variable}}}" in COMPOSE["x-required-secrets"]
    for name, service in COMPOSE["services"].items():
        text = yaml.safe_dump(service.get("environment", {})) + " ".join(
            str(part) for part in service.get("command", []))
        for variable in SECRETS:
            assert f"${{{variable}" not in text, f"{name} is given {variable} in the clear"
    for name in APP_SERVICES:
        service = COMPOSE["services"][name]
        assert set(service["secrets"]) == set(SECRETS.values()), name
        env = service["environment"]
        for variable in ("DJANGO_SECRET_KEY_FILE", "DATABASE_PASSWORD_FILE",
                         "REDIS_PASSWORD_FILE", "TF_SERVING_ACCESS_TOKEN_FILE"):
            assert env[variable].startswith("/run/secrets/"), (name, variable)
        assert env["DATABASE_URL"] == "postgres://platform@postgres:5432/platform"
    postgres = COMPOSE["services"]["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert postgres["secrets"] == ["postgres_password"]


def test_publish_checks_ops_against_the_tf_serving_release_compose_runs() -> None:
    from serving.serving_ops import serving_ops

    tag = COMPOSE["services"]["tfserving"]["image"].split(":", 1)[1]
    assert COMPOSE["x-app"]["environment"]["TF_SERVING_VERSION"] == tag
    assert serving_ops(version=tag)  # its op list is kept, or no app would start


def test_gpu_worker_reserves_nvidia_devices() -> None:
    devices = COMPOSE["services"]["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_the_gpu_worker_runs_an_image_with_tensorflow_s_cuda_libraries() -> None:
    """Its own image, built with GPU=1: the pinned TensorFlow's [and-cuda] extra. (Built where
    a GPU and the NVIDIA toolkit are; not on the CI machine.)"""
    worker = COMPOSE["services"]["worker-gpu"]
    assert worker["build"]["args"] == {"GPU": "1"} and worker["image"] == "tfplatform-gpu:latest"
    assert all(COMPOSE["services"][name]["image"] == "tfplatform:latest"
               for name in APP_SERVICES if name != "worker-gpu")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG GPU=0" in dockerfile
    assert ('"tensorflow[and-cuda]==$(sed -n '
            "'s/^tensorflow==//p' requirements-app.txt)\"") in dockerfile
    # What that sed finds: the one pinned TensorFlow.
    assert re.findall(r"^tensorflow==\S+$", (ROOT / "requirements-app.txt").read_text(), re.M)


def test_the_image_installs_requirements_txt_s_pins_without_the_development_tools() -> None:
    """requirements-app.txt (`make requirements-app.txt`): every pin as in requirements.txt,
    and none of the tools only development and the tests use."""
    def pins(name: str) -> dict[str, str]:
        found = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / name).read_text(), re.M)
        return {re.sub(r"[-_.]+", "-", package).lower(): version for package, version in found}

    app, everything = pins("requirements-app.txt"), pins("requirements.txt")
    assert {"django", "tensorflow", "jupyterlab", "gunicorn", "drf-spectacular-sidecar"} <= set(app)
    assert {package: version for package, version in app.items()
            if everything.get(package, version) != version} == {}
    assert not {"pytest", "mypy", "ruff", "playwright", "pyspark", "mkdocs-material",
                "podman-compose", "schemathesis"} & set(app)
    assert "COPY requirements-app.txt ." in (ROOT / "Dockerfile").read_text()


def test_tf_serving_shares_the_model_volume_with_the_platform_read_only() -> None:
    services = COMPOSE["services"]
    # A served model is a program: it must not write the store of every tenant's models.
    assert "models:/models:ro" in services["tfserving"]["volumes"]
    assert "models:/models" in services["web"]["volumes"]
    assert "--model_config_file=/models/models.config" in services["tfserving"]["command"]


def test_only_the_web_app_and_the_model_loader_reach_tf_serving_on_a_network_with_no_route_out(
) -> None:
    """TF Serving has no authentication and a reload RPC; trials, workers, the scheduler and
    the databases are not on its network (the embedded server has a token instead). The
    optional Prometheus is, to scrape its metrics page."""
    services = COMPOSE["services"]
    assert COMPOSE["networks"]["serving"] == {"internal": True}
    on_serving = {name for name, service in services.items()
                  if "serving" in service.get("networks", [])}
    assert on_serving == {"web", "model-loader", "tfserving", "gateway", "prometheus"}
    assert services["tfserving"]["networks"] == ["serving"]
    for name in ("web", "model-loader"):
        assert "default" in services[name]["networks"]  # PostgreSQL, Redis
    assert "--grpc_channel_arguments=grpc.max_receive_message_length=67108864" in services[
        "tfserving"]["command"]


def test_users_reach_tf_serving_only_through_the_gateway_which_holds_no_platform_secret(
) -> None:
    """The gateway (serving/gateway.py) takes users' platform tokens in front of stock TF
    Serving; the proxy publishes it over TLS. It gets its own token and nothing of the app's:
    no database, Redis or secret key."""
    services = COMPOSE["services"]
    gateway = services["gateway"]
    assert gateway["command"][:3] == ["python", "-m", "serving.gateway"]
    assert (ROOT / "serving" / "gateway.py").is_file()
    assert "--upstream_grpc=tfserving:8500" in gateway["command"]
    assert "--upstream_rest=http://tfserving:8501" in gateway["command"]
    assert gateway["secrets"] == ["serving_access_token"]
    assert gateway["environment"] == {
        "PYTHONPATH": "/app", "TF_SERVING_ACCESS_TOKEN_FILE": "/run/secrets/serving_access_token"}
    app = COMPOSE["x-app"]["environment"]
    assert (app["TF_SERVING_FRONT_GRPC"], app["TF_SERVING_FRONT_REST"]) == (
        "gateway:8500", "http://gateway:8501")
    assert "TF_SERVING_FRONT_REFRESH_SECONDS" not in app  # pushed to, every few seconds
    sites = _caddy_sites()
    platform = sites["{$PLATFORM_DOMAIN:localhost}"]
    assert re.search(r"handle /v1/models/\* \{\s*reverse_proxy gateway:8501\s*\}", platform)
    grpc_site = sites["{$PLATFORM_DOMAIN:localhost}:{$PLATFORM_SERVING_GRPC_PORT:8543}"]
    assert grpc_site.split() == ["reverse_proxy", "h2c://gateway:8500", "}"]
    port = "${PLATFORM_SERVING_GRPC_PORT:-8543}"
    assert f"{port}:{port}" in services["proxy"]["ports"]
    assert services["proxy"]["environment"]["PLATFORM_SERVING_GRPC_PORT"] == port


def test_tf_serving_takes_the_session_thread_settings_the_embedded_server_takes() -> None:
    command = COMPOSE["services"]["tfserving"]["command"]
    for setting in ("INTRA_OP", "INTER_OP"):
        flag = f"--tensorflow_{setting.lower()}_parallelism"
        # Unset, 0: TF Serving's own default, the embedded server's too.
        assert f"{flag}=${{TF_SERVING_{setting}_PARALLELISM:-0}}" in command


def test_app_image_puts_platform_folder_on_the_path() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "PYTHONPATH=/app/platform:/app" in dockerfile


def test_app_image_compiles_the_platform_it_copies() -> None:
    # It runs with PYTHONDONTWRITEBYTECODE, as a user who cannot write /app: what is not compiled
    # at build is compiled again by every process and trial task that starts.
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copied = lines.index("COPY . .")
    compiled = next(i for i, line in enumerate(lines) if "-m compileall" in line)
    assert compiled > copied
    assert set(lines[compiled].split()) >= {"platform", "training", "confinement", "serving"}


class _ComposeLoader(yaml.SafeLoader):
    """Compose's own `!reset` tag (an override clearing the base file's value)."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: {"!reset": node.value})
CONTAINERS = yaml.load(
    (ROOT / "docker-compose.containers.yml").read_text(),
    Loader=_ComposeLoader,  # noqa: S506 - SafeLoader plus one tag
)
DATA = "${PLATFORM_DATA:-/srv/tfplatform}"


def _without_resets(value: object) -> object:
    if isinstance(value, dict):
        if "!reset" in value:
            return []
        return {k: _without_resets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_resets(v) for v in value]
    return value


def test_the_container_runtime_override_matches_compose_spec_schema() -> None:
    schema = json.loads((peer_data_or_skip() / "compose-spec" / "compose-spec.json").read_text())
    jsonschema.validate(_without_resets(CONTAINERS), schema)


def test_only_worker_nodes_get_the_engine_socket_and_they_use_it_for_trials() -> None:
    services = CONTAINERS["services"]
    with_socket = {name for name, service in services.items()
                   if any("docker.sock" in str(v) for v in service.get("volumes", []))}
    assert with_socket == {"worker-cpu", "worker-gpu"}
    for name in with_socket:
        env = services[name]["environment"]
        assert env["PLATFORM_TRIAL_RUNTIME"] == "docker"
        assert env["PLATFORM_CONTAINER_ENGINE_URL"] == "unix:///var/run/docker.sock"
        assert env["PLATFORM_CONTAINER_IMAGE"] == COMPOSE["x-app"]["image"]
        assert services[name]["security_opt"] == {"!reset": []}
        # Both nodes share the host's engine: a gang across them gets a network of its own, on
        # which each node's tasks answer to its address (a name, as network aliases must be).
        assert env["PLATFORM_CONTAINER_GANG_NETWORK"] == "gang"
        command = COMPOSE["services"][name]["command"]
        address = command[command.index("--address") + 1]
        assert re.fullmatch(r"[a-z][a-z0-9-]*", address), address


def test_every_path_a_trial_container_is_given_is_the_same_on_the_host_and_in_the_worker() -> None:
    services = CONTAINERS["services"]
    for name in ("migrate", "web", "lab", "scheduler", "worker-cpu", "worker-gpu"):
        env = services[name]["environment"]
        for setting in ("PLATFORM_WORK_DIR", "DATASETS_DIR", "PLATFORM_MEDIA_ROOT",
                        "PLATFORM_RUN_DIR", "PLATFORM_ENVIRONMENTS_DIR", "MODEL_BASE_PATH",
                        "PLATFORM_HOME_DIR"):
            assert env[setting].startswith(f"{DATA}/"), (name, setting)
        assert f"{DATA}:{DATA}" in services[name]["volumes"], name
    serving = services["tfserving"]
    assert f"--model_config_file={DATA}/models/models.config" in serving["command"]
    assert f"{DATA}/models:{DATA}/models:ro" in serving["volumes"]
    # The rest of TF Serving's command is the base file's.
    assert serving["command"][1:] == COMPOSE["services"]["tfserving"]["command"][1:]


def test_workspace_containers_reach_the_web_app_and_nothing_else_of_the_platform() -> None:
    """A workspace's `tfp` needs the API; its container joins a network of the web app's only."""
    name = CONTAINERS["networks"]["workspace-api"]["name"]
    assert CONTAINERS["networks"]["workspace-api"]["internal"] is True
    for worker in ("worker-cpu", "worker-gpu"):
        assert CONTAINERS["services"][worker]["environment"][
            "PLATFORM_CONTAINER_WORKSPACE_NETWORK"] == name
    on_it = {service for service, spec in CONTAINERS["services"].items()
             if "workspace-api" in spec.get("networks", [])}
    assert on_it == {"web"}
    assert COMPOSE["x-app"]["environment"]["PLATFORM_WORKSPACE_API_URL"] == "http://web:8000"
