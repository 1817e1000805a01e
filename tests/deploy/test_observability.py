"""Observability end to end: a REAL Prometheus (Debian's package) scrapes `hsi metrics serve` and the real embedded
llama-server with the shipped scrape configuration (targets moved to loopback), and the Grafana dashboard's queries
are checked against what the two expose and what Prometheus answers.

The exporter reads a real DuckDB file holding a processed set of batches (tests/support/observability_data.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hsi_dagster.llm.embedded import free_port
from hsi_dagster.storage.metrics import UTILIZATION_BUCKETS
from tests.support.debian_tools import ensure_debian_tools
from tests.support.exporter import Exporter, running_exporter
from tests.support.llm_fixtures import RunningLlama
from tests.support.observability_data import ProcessedSet, build_processed_set

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_CONFIG = REPO / "deploy/prometheus/prometheus.yml"
DASHBOARD = REPO / "deploy/grafana/dashboards/hsi.json"
DATASOURCES = REPO / "deploy/grafana/provisioning/datasources/prometheus.yml"
DASHBOARD_PROVIDER = REPO / "deploy/grafana/provisioning/dashboards/hsi.yml"
COMPOSE = REPO / "docker-compose.prod.yml"
SCRAPE_INTERVAL = "1s"
WAIT_S = 45.0
PROMQL_WORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    return ensure_debian_tools({"prometheus": "prometheus", "promtool": "prometheus"})


@pytest.fixture(scope="module")
def processed(tmp_path_factory: pytest.TempPathFactory) -> ProcessedSet:
    return build_processed_set(tmp_path_factory.mktemp("observability") / "hsi.duckdb")


@pytest.fixture(scope="module")
def exporter(processed: ProcessedSet) -> Iterator[Exporter]:
    with running_exporter(processed.db_path) as running:
        yield running


def loopback_config(exporter: Exporter, llama_url: str) -> dict:
    """The shipped configuration with its compose targets moved to the loopback ports of this test."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval=SCRAPE_INTERVAL, scrape_timeout=SCRAPE_INTERVAL)
    loopback = {"hsi": f"127.0.0.1:{exporter.port}", "llama-server": llama_url.removeprefix("http://")}
    for job in config["scrape_configs"]:
        for group in job["static_configs"]:
            group["targets"] = [loopback[job["job_name"]]]
    return config


@pytest.fixture(scope="module")
def prometheus(
    tools: dict[str, str], exporter: Exporter, llama_server: RunningLlama, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Prometheus on 127.0.0.1 with its own config and storage folder; stopped (killed if need be) at the end."""
    folder = tmp_path_factory.mktemp("prometheus")
    (folder / "prometheus.yml").write_text(yaml.safe_dump(loopback_config(exporter, llama_server.url)))
    (folder / "llama_api_key").write_text("unused-by-the-test-server\n")  # where the shipped file points
    port = free_port()
    with open(folder / "prometheus.log", "w") as log:
        process = subprocess.Popen(
            [
                tools["prometheus"],
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, (folder / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Prometheus did not become ready"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def query(prometheus: str, expr: str) -> list[dict]:
    reply = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert reply["status"] == "success", (expr, reply)
    return reply["data"]["result"]


def wait_for(prometheus: str, expr: str, *, series: int = 1, samples: int = 1) -> list[dict]:
    """Poll until `expr` returns `series` series; with `samples` > 1 (`expr` a plain selector), until each series
    holds that many scraped samples."""
    deadline = time.monotonic() + WAIT_S
    while True:
        result = query(prometheus, f"count_over_time({expr}[1m])" if samples > 1 else expr)
        if len(result) >= series and all(float(r["value"][1]) >= samples for r in result if samples > 1):
            return query(prometheus, expr)
        assert time.monotonic() < deadline, f"no {series} series for {expr} within {WAIT_S} s: {result}"
        time.sleep(0.5)


def by_label(result: list[dict], label: str) -> dict[str, float]:
    return {r["metric"][label]: float(r["value"][1]) for r in result}


# --- the shipped files ---------------------------------------------------------------------------------------------
def test_promtool_checks_the_shipped_scrape_configuration(tools: dict[str, str], tmp_path: Path) -> None:
    """The very file, beside a key file where its relative credentials_file points (as mounted in compose)."""
    shutil.copy(PROMETHEUS_CONFIG, tmp_path / "prometheus.yml")
    assert (tmp_path / "prometheus.yml").read_bytes() == PROMETHEUS_CONFIG.read_bytes()
    (tmp_path / "llama_api_key").write_text("k\n")
    done = subprocess.run(
        [tools["promtool"], "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
    # ... and the check bites: without the key file the same configuration is refused
    (tmp_path / "llama_api_key").unlink()
    refused = subprocess.run(
        [tools["promtool"], "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, timeout=60
    )
    assert refused.returncode != 0


def test_promtool_checks_the_exposition(tools: dict[str, str], exporter: Exporter) -> None:
    exposition = httpx.get(exporter.url, timeout=10).text
    done = subprocess.run(
        [tools["promtool"], "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hsi_context_utilization_ratio_bucket" in exposition


def test_compose_wires_prometheus_grafana_and_the_exporter() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"][0] for job in config["scrape_configs"]}
    exporter_host, exporter_port = targets["hsi"].split(":")
    assert services[exporter_host]["command"] == [
        "hsi",
        "metrics",
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        exporter_port,
    ]
    assert "ports" not in services[exporter_host]  # reached on the compose network only
    llama_host, llama_port = targets["llama-server"].split(":")
    assert llama_host in services and services[llama_host]["environment"]["LLM_PORT"] == llama_port
    prometheus = services["prometheus"]
    mounted = {v["target"]: v for v in prometheus["volumes"] if isinstance(v, dict)}
    config_mount = mounted["/etc/prometheus/prometheus.yml"]
    assert config_mount["source"] == "./deploy/prometheus/prometheus.yml" and config_mount["read_only"] is True
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    llama_job = next(job for job in config["scrape_configs"] if job["job_name"] == "llama-server")
    key_file = Path("/etc/prometheus") / llama_job["authorization"]["credentials_file"]  # relative to the config
    assert {"source": "llama_api_key", "target": str(key_file)} in prometheus["secrets"]
    grafana = services["grafana"]
    grafana_mounts = {v["target"]: v["source"] for v in grafana["volumes"] if isinstance(v, dict)}
    assert grafana_mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    provider = yaml.safe_load(DASHBOARD_PROVIDER.read_text())["providers"][0]
    assert grafana_mounts[provider["options"]["path"]] == "./deploy/grafana/dashboards"
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert (
        datasource["url"] == "http://prometheus:9090" and "--web.listen-address=0.0.0.0:9090" in prometheus["command"]
    )
    for name in ("prometheus", "grafana"):
        assert all(str(port).startswith("127.0.0.1:") for port in services[name]["ports"]), name


# --- a real Prometheus ---------------------------------------------------------------------------------------------
def test_prometheus_finds_context_utilization_of_the_processed_batches(
    prometheus: str, processed: ProcessedSet
) -> None:
    by_camera = processed.utilization_by_camera()
    counts = by_label(wait_for(prometheus, "hsi_context_utilization_ratio_count", series=len(by_camera)), "camera_id")
    assert counts == {camera: len(values) for camera, values in by_camera.items()}
    sums = by_label(query(prometheus, "hsi_context_utilization_ratio_sum"), "camera_id")
    assert sums == pytest.approx({camera: sum(values) for camera, values in by_camera.items()})
    for bound in UTILIZATION_BUCKETS:
        buckets = by_label(query(prometheus, f'hsi_context_utilization_ratio_bucket{{le="{bound:g}"}}'), "camera_id")
        assert buckets == {camera: sum(1 for v in values if v <= bound) for camera, values in by_camera.items()}
    # The p95 a dashboard shows comes out of Prometheus's own histogram maths on these buckets.
    p95 = by_label(
        query(prometheus, "histogram_quantile(0.95, sum by (camera_id, le) (hsi_context_utilization_ratio_bucket))"),
        "camera_id",
    )
    for camera, values in by_camera.items():
        nearest_rank = sorted(values)[math.ceil(0.95 * len(values)) - 1]
        upper = min(b for b in UTILIZATION_BUCKETS if b >= nearest_rank)
        lower = max((b for b in UTILIZATION_BUCKETS if b < upper), default=0.0)
        assert lower <= p95[camera] <= upper, (camera, p95[camera], values)
    metadata = httpx.get(
        f"{prometheus}/api/v1/metadata", params={"metric": "hsi_context_utilization_ratio"}, timeout=10
    ).json()
    assert metadata["data"]["hsi_context_utilization_ratio"][0]["type"] == "histogram"


def test_prometheus_scrapes_the_exporter_and_llama_server_side_by_side(prometheus: str, llama_server) -> None:
    up = wait_for(prometheus, "up", series=2)
    assert {r["metric"]["job"]: r["value"][1] for r in up} == {"hsi": "1", "llama-server": "1"}
    waiting = by_label(wait_for(prometheus, "hsi_batches_waiting", series=2), "stage")
    assert waiting == {"unrecorded": 1.0, "unassessed": 1.0}
    assert float(query(prometheus, "hsi_oldest_unassessed_batch_age_seconds")[0]["value"][1]) > 86400
    served = wait_for(prometheus, '{__name__=~"llamacpp:.+", job="llama-server"}', series=5)
    assert {"llamacpp:prompt_tokens_total", "llamacpp:requests_processing"} <= {r["metric"]["__name__"] for r in served}


# --- the dashboard -------------------------------------------------------------------------------------------------
def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once strings, label matchers, ranges,
    grouping clauses and function calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?", text):
        word = match.group(0)
        if word.endswith("(") or match.group(0).rstrip().lower() in PROMQL_WORDS:
            continue
        names.add(word.strip())
    selector_names = re.findall(r'__name__\s*=\s*"([^"]+)"', expr)
    return names | set(selector_names)


def exposed_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.95, sum by (camera_id, le) (rate(hsi_x_bucket{le="0.8", a=~"b|c"}[$__rate_interval])))'
    assert metric_names(expr) == {"hsi_x_bucket"}
    assert metric_names("rate(llamacpp:prompt_tokens_total[5m]) * 60 and on (job) up") == {
        "llamacpp:prompt_tokens_total",
        "up",
    }


def test_every_dashboard_query_names_a_metric_the_exporter_or_llama_server_exposes(
    exporter: Exporter, llama_server: RunningLlama
) -> None:
    ours = exposed_names(httpx.get(exporter.url, timeout=10).text)
    # The real embedded server's /metrics (llama-server --metrics) is the source of the llamacpp: names.
    theirs = exposed_names(httpx.get(f"{llama_server.url}/metrics", timeout=10).text)
    assert any(name.startswith("llamacpp:") for name in theirs)
    known = ours | theirs | {"up"}  # `up` is Prometheus's own, per scrape target
    queries = dashboard_queries()
    assert len(queries) >= 15
    used = set()
    for title, expr in queries:
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= known, (title, names - known)
        used |= names
    # Each family the issue asks for is on the dashboard.
    for family in (
        "hsi_context_utilization_ratio_bucket",
        "hsi_risk_assessments_total",
        "hsi_llm_latency_seconds_bucket",
        "hsi_llm_prompt_tokens_total",
        "hsi_llm_cached_prompt_tokens_total",
        "hsi_llm_completion_tokens_total",
        "hsi_prompt_sections_removed_total",
        "hsi_quarantined_records_total",
        "hsi_closed_batches_total",
        "hsi_batches_waiting",
        "hsi_oldest_unassessed_batch_age_seconds",
    ):
        assert family in used, family
    assert any(name.startswith("llamacpp:") for name in used)


def test_every_dashboard_query_returns_data_from_prometheus(prometheus: str) -> None:
    """Each panel's query, as Grafana would send it, parses and returns series (rates need two scrapes)."""
    wait_for(prometheus, "hsi_risk_assessments_total", samples=3)
    wait_for(prometheus, '{__name__="llamacpp:prompt_tokens_total"}', samples=3)
    for title, expr in dashboard_queries():
        result = query(prometheus, expr.replace("$__rate_interval", "1m"))
        assert result, (title, expr)


def test_dashboard_is_provisionable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}, panel["title"]
        assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"]), panel["title"]
