"""The Dagster project loads: CLI validation, and a real dagster-webserver serving the lineage over GraphQL."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hsi_dagster.llm.embedded import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LINEAGE = ["detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]


@pytest.fixture
def dagster_env(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": str(tmp_path / "hsi.duckdb"),
        "HSI_ENV_FILE": os.devnull,
    }


def test_definitions_validate_from_the_cli(dagster_env):
    done = subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=dagster_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def test_webserver_graphql_lists_the_four_assets_with_their_lineage(dagster_env, tmp_path):
    port = free_port()
    log = open(tmp_path / "webserver.log", "w")
    server = subprocess.Popen(
        [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=dagster_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    query = "{ assetNodes { assetKey { path } dependencyKeys { path } groupName } }"
    try:
        deadline = time.monotonic() + 120
        nodes = None
        while time.monotonic() < deadline:
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=10)
                nodes = reply.json()["data"]["assetNodes"]
                if nodes:
                    break
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                pass
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            time.sleep(1)
        assert nodes, "the webserver never answered the GraphQL query"
        deps = {"/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]} for n in nodes}
        assert set(LINEAGE) <= set(deps)
        for upstream, downstream in zip(LINEAGE, LINEAGE[1:]):
            assert deps[downstream] == {upstream}, downstream
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
