"""The optional monitoring services of docker-compose.yml (profile `monitoring`): Prometheus
scraping the platform with its token, the Celery workers and TF Serving's metrics page, and
Grafana with a provisioned datasource and a dashboard whose queries name metrics that exist."""

import json
import re
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_compose import COMPOSE, CONTAINERS
from tests.fixtures_settings import PlatformSettingsOverride

ROOT = Path(__file__).resolve().parents[2]
SERVICES = COMPOSE["services"]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "tfplatform.json"
# Series that come from elsewhere: TF Serving's monitoring endpoint (its metric names, as its
# sources define them) and NVIDIA's DCGM exporter.
EXTERNAL = {
    ":tensorflow:serving:request_count",
    ":tensorflow:serving:request_latency_bucket",
    "DCGM_FI_DEV_GPU_UTIL",
}


def _mounted(service: str, target: str) -> Path:
    [source] = [v.split(":")[0] for v in SERVICES[service]["volumes"]
                if v.split(":")[1] == target]
    return ROOT / source


def test_monitoring_services_are_optional_and_unpublished() -> None:
    for name in ("prometheus", "grafana"):
        assert SERVICES[name]["profiles"] == ["monitoring"]
        assert not SERVICES[name].get("ports")
    for name, service in SERVICES.items():
        if name not in ("prometheus", "grafana"):
            assert "profiles" not in service, name  # the platform runs without them


def test_prometheus_scrapes_the_platform_with_its_token_celery_and_tf_serving() -> None:
    config = yaml.safe_load(_mounted("prometheus", "/etc/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    platform = jobs["platform"]
    assert platform["static_configs"][0]["targets"] == ["web:8000"]
    assert platform.get("metrics_path", "/metrics") == "/metrics"
    assert platform["authorization"]["type"] == "Bearer"
    secret = platform["authorization"]["credentials_file"]
    assert secret == "/run/secrets/metrics_token" and "metrics_token" in SERVICES["prometheus"][
        "secrets"]
    assert COMPOSE["secrets"]["metrics_token"] == {"environment": "PLATFORM_METRICS_TOKEN"}
    assert COMPOSE["x-app"]["environment"]["PLATFORM_METRICS_TOKEN"].startswith(
        "${PLATFORM_METRICS_TOKEN")
    # /metrics needs the token from every address, so Prometheus refuses to start without one.
    shell, flag, script, name = SERVICES["prometheus"]["entrypoint"]
    assert (shell, flag, name) == ("/bin/sh", "-c", "prometheus")
    assert script.startswith("test -s /run/secrets/metrics_token || {")
    assert "exit 1; }; exec /bin/prometheus \"$$@\"" in script  # compose turns $$ into $
    assert "web" in COMPOSE["x-app"]["environment"]["DJANGO_ALLOWED_HOSTS"].split(",")

    serving = jobs["tfserving"]
    assert serving["static_configs"][0]["targets"] == ["tfserving:8501"]  # its REST port
    monitoring = _mounted("tfserving", "/etc/tfserving/monitoring.config").read_text()
    assert re.search(r'path:\s*"' + re.escape(serving["metrics_path"]) + '"', monitoring)
    assert re.search(r"enable:\s*true", monitoring)
    flag = "--monitoring_config_file=/etc/tfserving/monitoring.config"
    assert flag in SERVICES["tfserving"]["command"]
    assert flag in CONTAINERS["services"]["tfserving"]["command"]

    for target in jobs["celery"]["static_configs"][0]["targets"]:
        host, port = target.split(":")
        env = SERVICES[host]["environment"]
        assert env["PLATFORM_CELERY_METRICS_PORT"] == port
        assert env["PLATFORM_CELERY_METRICS_ADDRESS"] == "0.0.0.0"  # noqa: S104
        assert env["DATABASE_URL"] == COMPOSE["x-app"]["environment"]["DATABASE_URL"]


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard_behind_the_proxy() -> None:
    provisioning = _mounted("grafana", "/etc/grafana/provisioning")
    [source] = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load(
        (provisioning / "dashboards" / "tfplatform.yml").read_text())["providers"]
    dashboards = _mounted("grafana", provider["options"]["path"])
    assert DASHBOARD.parent == dashboards
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert all(t["datasource"]["uid"] == source["uid"] for p in panels for t in p["targets"])
    assert "secrets" in SERVICES["grafana"] and "GF_SECURITY_ADMIN_PASSWORD__FILE" in SERVICES[
        "grafana"]["environment"]
    caddyfile = (ROOT / "deploy" / "Caddyfile").read_text()
    assert re.search(r"handle /grafana\*\s*\{\s*reverse_proxy grafana:3000", caddyfile)


def _dashboard_metrics() -> set[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    names = set()
    for expr in exprs:
        expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)  # selectors and ranges
        expr = re.sub(r"\b(by|on|group_left|without)\s*\([^)]*\)", "", expr)
        # Identifiers not followed by "(" (functions, aggregations) are metric names.
        names |= {name for name, call in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", expr)
                  if not call}
    return names


@pytest.mark.django_db
def test_the_dashboard_covers_queue_gpus_and_serving_and_names_metrics_that_exist(
    client: Client, settings: object, platform_settings_override: PlatformSettingsOverride,
) -> None:
    client.get("/healthz")  # some web traffic: django-prometheus's histograms have series
    platform_settings_override(metrics_token="a-token")
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer a-token").content.decode()
    served = set()
    for family in text_string_to_metric_families(text):
        served.add(family.name)
        served |= {sample.name for sample in family.samples}
        if family.type in ("histogram", "gaugehistogram"):
            served.add(f"{family.name}_bucket")
        if family.type == "counter":
            served.add(f"{family.name}_total")
    used = _dashboard_metrics()
    assert {"tfplatform_queue_length", "tfplatform_team_gpus_allocated",
            "tfplatform_gpu_allocation_info", ":tensorflow:serving:request_latency_bucket",
            "DCGM_FI_DEV_GPU_UTIL"} <= used
    missing = used - served - EXTERNAL
    assert not missing, missing
