"""compose/ (issue 20): no container runtime runs here, so what can be checked is: the compose
file parses; every streamon service's command is a valid ``streamon`` command line and its
environment names variables streamon reads; the query it mounts builds; Prometheus scrapes
the workers' metrics; the Dockerfile installs the project as a non-root user, with Java only
in the Spark target."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from processors.cli import build_parser
from processors.commands.queries import load_plan
from processors.runtime.config import ENV_BOOTSTRAP, ENV_SCHEMA_REGISTRY
from processors.runtime.kafka_security import ENV_PREFIX
from processors.runtime.web_auth import ENV_WEB_TOKEN

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
KNOWN_ENV = {ENV_BOOTSTRAP, ENV_SCHEMA_REGISTRY, ENV_WEB_TOKEN}


def compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def streamon_services() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose()["services"].items() if "streamon" in str(s.get("image"))}


def test_the_compose_file_has_the_services_the_readme_walks_through() -> None:
    services = compose()["services"]
    assert {"kafka", "kafka-1", "kafka-2", "kafka-3", "worker", "prometheus", "grafana",
            "spark", "schema-registry", "publisher"} <= set(services)  # fmt: skip
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert {services[f"kafka-{i}"]["environment"]["KAFKA_NODE_ID"] for i in (1, 2, 3)} == {1, 2, 3}
    assert "ports" not in services["worker"]  # scaled: no fixed host port
    for name, service in services.items():  # what is published binds to loopback only
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    assert (COMPOSE / ".env").read_text().strip() == "COMPOSE_PROFILES=single"


@pytest.mark.parametrize("name", ["worker", "publisher", "spark"])
def test_each_streamon_command_is_a_valid_command_line(name: str) -> None:
    service = streamon_services()[name]
    args = build_parser().parse_args(service["command"])
    assert args.command == service["command"][0]
    for var in service["environment"]:
        assert var in KNOWN_ENV or var.startswith(ENV_PREFIX), var


def test_the_worker_listens_beyond_loopback_only_inside_the_network() -> None:
    args = build_parser().parse_args(streamon_services()["worker"]["command"])
    assert args.web_host == "0.0.0.0" and args.web_port == 6066
    prometheus = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["dns_sd_configs"] == [{"names": ["worker"], "type": "A", "port": 6066}]


def test_the_mounted_query_builds_and_its_sample_data_fits_it() -> None:
    plan = load_plan(str(COMPOSE / "queries" / "query.py"))
    assert [s.topic for s in plan.streams] == ["readings"]
    lines = (COMPOSE / "queries" / "readings.jsonl").read_text().splitlines()
    assert len(lines) == 200 and all(line.startswith('{"sensor_id"') for line in lines)


def test_the_dockerfile_installs_the_project_as_a_non_root_user() -> None:
    text = (COMPOSE / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    worker, spark = stages
    assert worker.startswith("python:3.11-slim AS worker")
    assert "pip install --no-cache-dir ." in worker and "USER streamon" in worker
    assert "openjdk" not in worker and "openjdk-17-jre-headless" in spark
    assert spark.rstrip().endswith("USER streamon")
    for folder in ("processors", "topics", "schemas", "spark_bridge"):
        assert f"COPY {folder} ./{folder}" in worker


def test_grafana_provisions_a_dashboard_on_prometheus() -> None:
    import json

    provisioning = COMPOSE / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["url"] == "http://prometheus:9090"
    dashboard = json.loads((provisioning / "dashboards" / "streamon.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in ("streamon_agent_tuples_in_total", "streamon_agent_output_latency_seconds",
                   "streamon_plan_order_info", "streamon_dropbox_keep_ratio"):  # fmt: skip
        assert metric in exprs
