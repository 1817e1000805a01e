"""#15 item 11: every server listens on 127.0.0.1 by default; with LLAMA_API_KEY set, a request without it gets 401;
the key never appears in logs, Dagster run records and event logs, DuckDB, or the resource config the UI shows.

The servers the project starts: llama.cpp's server (`hsi llm serve`, the embedded one of the tests and `hsi demo`),
the metrics exporter (`hsi metrics serve`), and Dagster's own (`dagster dev`, the compose services). The enrichment
gateway, Frigate and MQTT are servers the project calls, not ones it starts (asserted: nothing else in the package
opens a listening socket). Bind addresses are read from the kernel's socket table (/proc/net/tcp), not from flags.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import httpx
import pytest
import yaml

from hsi_dagster import settings as settings_module
from hsi_dagster.cli import metrics as metrics_cli
from hsi_dagster.cli.main import build_parser
from hsi_dagster.definitions import build_resources
from hsi_dagster.llm.embedded import EmbeddedServerProcess, free_port
from hsi_dagster.resources.frigate import FrigateApiError, FrigateResource, FrigateWriteError
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.instance_home import project_env, project_home, run_hsi
from tests.support.pipeline_helpers import closed_windows, hours_ago

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KEY = "sk-hsi-secret-7c1e94d2b5"  # distinctive: any occurrence anywhere is a leak


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket in LISTEN state on `port` (IPv4 and IPv6), from /proc/net/tcp*."""
    found = set()
    for name, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:
                continue
            raw = bytes.fromhex(address)
            if width == 8:
                found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def wait_listening(port: int, seconds: float = 60.0) -> set[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = listening_addresses(port)
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {seconds:.0f}s")


# ----------------------------------------------------------------------------------------------- defaults
def test_every_bind_default_is_loopback() -> None:
    assert settings_module.HsiSettings.model_fields["LLM_HOST"].default == "127.0.0.1"
    assert load_settings(os.devnull).LLM_HOST == "127.0.0.1"
    assert inspect.signature(EmbeddedServerProcess).parameters["host"].default == "127.0.0.1"
    parser = build_parser()
    serve = parser.parse_args(["llm", "serve"])
    assert serve.host is None  # then LLM_HOST, 127.0.0.1 (the socket is checked below with a real server)
    assert parser.parse_args(["metrics", "serve"]).host == metrics_cli.DEFAULT_HOST == "127.0.0.1"
    example = (REPO / "hsi.env.example").read_text()
    assert re.search(r"^LLM_HOST=127\.0\.0\.1$", example, re.M)


def test_the_package_opens_no_other_listening_socket() -> None:
    """Servers are started in two places only (llama.cpp's, the metrics exporter); free_port binds and closes."""
    hits = []
    for path in sorted((REPO / "hsi_dagster").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(
                r"\.bind\(|\.listen\(|serve_forever|start_http_server\(|HTTPServer|uvicorn|xllamacpp\.Server", line
            ):
                hits.append(f"{path.relative_to(REPO)}:{number}")
    allowed = {"hsi_dagster/llm/embedded.py", "hsi_dagster/cli/metrics.py"}
    assert {hit.split(":")[0] for hit in hits} <= allowed, hits


def test_compose_publishes_every_port_on_loopback_only() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.prod.yml").read_text())
    published = []
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            spec = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}"
            published.append((name, spec))
            assert str(spec).startswith("127.0.0.1:"), (name, port)
    assert {name for name, _ in published} >= {"ai-llm", "dagster-webserver", "prometheus", "grafana"}
    # Services that listen on 0.0.0.0 inside their container (llama-server, the code server) publish nothing else.
    assert "ports" not in compose["services"]["dagster-code"] and "ports" not in compose["services"]["postgres"]


def test_dagster_instructions_do_not_open_the_ui_to_the_network() -> None:
    texts = {
        "README.md": (REPO / "README.md").read_text(),
        "cli/demo.py": (REPO / "hsi_dagster/cli/demo.py").read_text(),
        "dev": (REPO / "dev").read_text() if (REPO / "dev").is_file() else "",
    }
    for name, text in texts.items():
        for line in text.splitlines():
            if re.search(r"dagster(-webserver)? dev|dagster-webserver|dg dev", line):
                assert not re.search(r"(-h|--host)[ =]+0\.0\.0\.0", line), (name, line)


def test_metrics_serve_listens_on_loopback(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    ingest_lines(db, closed_windows(["gate"], 1, start=hours_ago(1)))
    port = free_port()
    env = {**os.environ, "HSI_ENV_FILE": os.devnull, "HSI_DUCKDB_PATH": str(db)}
    proc = subprocess.Popen([str(BIN / "hsi"), "metrics", "serve", "--port", str(port)], env=env, cwd=tmp_path)
    try:
        assert wait_listening(port, 30) == {"127.0.0.1"}
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            proc.kill()
            signals = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
            raise AssertionError(f"hsi metrics serve outlived SIGTERM by 60 s: {signals}") from None
    assert proc.returncode == 0  # stopped by its own handler, not killed


# ----------------------------------------------------------------------------------------------- the real server
@pytest.fixture(scope="module")
def keyed_llm_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`hsi llm serve` as a user starts it (no --host, no LLM_HOST), with LLAMA_API_KEY; its output to a file."""
    tmp = tmp_path_factory.mktemp("keyed")
    port = free_port()
    log = tmp / "llm-serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("LLM_HOST", "LLAMA_SERVER_URL")}
    env.update({"HSI_ENV_FILE": os.devnull, "LLAMA_API_KEY": KEY, "CTX_SIZE": "4096", "PARALLEL": "1", "THREADS": "2"})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "hsi"), "llm", "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError("hsi llm serve did not become healthy: " + log.read_text()[-3000:])
        yield url, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.llm
def test_llm_serve_listens_on_loopback_and_refuses_requests_without_the_key(keyed_llm_serve) -> None:
    url, _ = keyed_llm_serve
    assert listening_addresses(int(url.rsplit(":", 1)[1])) == {"127.0.0.1"}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    # (llama-server also takes the key bare or as X-Api-Key: still the key, so those are not listed here)
    for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"X-Api-Key": "wrong-key"}):
        assert httpx.get(f"{url}/props", headers=headers, timeout=30).status_code == 401, headers
        assert httpx.get(f"{url}/slots", headers=headers, timeout=30).status_code == 401, headers
        assert httpx.post(f"{url}/v1/chat/completions", json=chat, headers=headers, timeout=30).status_code == 401
        assert httpx.post(f"{url}/tokenize", json={"content": "x"}, headers=headers, timeout=30).status_code == 401
    keyed = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{url}/props", headers=keyed, timeout=30).status_code == 200
    assert httpx.post(f"{url}/v1/chat/completions", json=chat, headers=keyed, timeout=120).status_code == 200


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _duckdb_text_hits(db: str, needle: str) -> list[str]:
    """Every table's text-like columns (VARCHAR, JSON, lists and structs cast to text) searched for `needle`."""
    hits = []
    with duckdb.connect(db, read_only=True) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
        ).fetchall()
        for table, column in columns:
            found = conn.execute(
                f'SELECT count(*) FROM "{table}" WHERE position(? IN CAST("{column}" AS VARCHAR)) > 0', [needle]
            ).fetchone()
            if found and found[0]:
                hits.append(f"{table}.{column}")
        assert columns, "no tables scanned"
    return hits


@pytest.mark.slow
@pytest.mark.llm
def test_the_key_never_appears_in_logs_run_records_duckdb_or_ui_config(keyed_llm_serve, tmp_path: Path) -> None:
    """A real `hsi process` with LLAMA_API_KEY against the keyed server: assessed, and the key is nowhere it wrote."""
    url, server_log = keyed_llm_serve
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["gate"], 1, start=hours_ago(2)))
    home = project_home(tmp_path)
    env = project_env(
        home,
        db,
        LLAMA_SERVER_URL=url,
        LLAMA_API_KEY=KEY,
        CTX_SIZE="4096",
        PARALLEL="1",
        NEMOTRON_MAX_OUTPUT_TOKENS="256",
        PROMPT_SAFETY_MARGIN_TOKENS="256",
    )
    done = run_hsi("process", env=env, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with duckdb.connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM risk_assessments").fetchone() == (1,)
    assert KEY not in done.stdout and KEY not in done.stderr
    assert KEY not in server_log.read_text(errors="replace")

    # Dagster: run records (config, tags), the event log (metadata, log messages), compute logs: every file.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert runs and all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        for run in runs:
            assert KEY not in repr(run.run_config) and KEY not in repr(run.tags)
            events = instance.all_logs(run.run_id)
            assert events and KEY not in repr(events)
    assert _files_containing(home, KEY.encode()) == []

    # DuckDB: every text column of every table, and the file's bytes.
    assert _duckdb_text_hits(db, KEY) == []
    assert KEY.encode() not in Path(db).read_bytes()


def test_the_ui_shows_the_env_var_name_not_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resource config the webserver serves (the repository snapshot) names LLAMA_API_KEY, never its value."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    from hsi_dagster import definitions

    monkeypatch.setenv("LLAMA_API_KEY", KEY)
    settings = load_settings(os.devnull, LLAMA_API_KEY=KEY)
    resources = build_resources(settings)
    defs = dg.Definitions(
        assets=definitions.defs.assets,
        jobs=definitions.defs.jobs,
        sensors=definitions.defs.sensors,
        resources=resources,
    )
    snapshot = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
    assert KEY not in snapshot
    assert "LLAMA_API_KEY" in snapshot  # the UI says where the key comes from
    assert KEY not in repr(resources) and KEY not in repr(settings)


def test_frigate_errors_name_the_endpoint_without_frigate_url_credentials() -> None:
    """FRIGATE_URL may carry a user and password (Frigate behind basic auth): an API or write-back error names the
    endpoint for the log, never the credentials. A closed port on loopback stands in for Frigate being down."""
    port = free_port()
    frigate = FrigateResource(url=f"http://hsi:s3cret-pass@127.0.0.1:{port}/?token=t0ken", timeout_seconds=2)
    errors: list[str] = []
    for call in (frigate.fetch_config, lambda: frigate.events_after(0.0), lambda: frigate.set_sub_label("e1", "x")):
        with pytest.raises((FrigateApiError, FrigateWriteError)) as raised:
            call()
        errors.append(str(raised.value))
    assert all(f"http://127.0.0.1:{port}/api/" in error for error in errors), errors
    assert not [error for error in errors if "s3cret" in error or "t0ken" in error or "hsi:" in error], errors
