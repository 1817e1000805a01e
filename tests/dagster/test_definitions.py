"""The Dagster project loads: CLI validation, and a real dagster-webserver serving the lineage over GraphQL."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hsi_dagster.llm.embedded import free_port
from tests.support.instance_home import project_env, project_home
from tests.support.processes import start_logged, stop_group, wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LINEAGE = ["detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]


@pytest.fixture
def dagster_env(tmp_path):
    return project_env(project_home(tmp_path), tmp_path / "hsi.duckdb")


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
    argv = [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
    server = start_logged(argv, dagster_env, REPO, tmp_path / "webserver.log")
    query = "{ assetNodes { assetKey { path } dependencyKeys { path } groupName } }"

    def asset_nodes() -> list | None:
        assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
        reply = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=10)
        return reply.json()["data"]["assetNodes"] or None

    try:
        nodes = wait_for("the webserver to answer the GraphQL query with the assets", asset_nodes, timeout=300)
        deps = {"/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]} for n in nodes}
        assert set(LINEAGE) <= set(deps)
        for upstream, downstream in zip(LINEAGE, LINEAGE[1:], strict=False):
            # enriched_contexts also reads the daily per-camera baselines (history, issue 25)
            extra = {"camera_baselines"} if downstream == "enriched_contexts" else set()
            assert deps[downstream] == {upstream} | extra, downstream
    finally:
        stop_group(server)


def test_loading_the_definitions_changes_no_environment_variable(tmp_path):
    """Importing hsi_dagster.definitions (what every Dagster process does) leaves os.environ as it found it, even
    with a settings file and an API key that exist only in that file."""
    (tmp_path / "hsi.env").write_text("HSI_DUCKDB_PATH=from-file.duckdb\nLLAMA_API_KEY=sk-file-only\n")
    probe = (
        "import json, os; before = dict(os.environ); import hsi_dagster.definitions as d; "
        "print(json.dumps({'same': dict(os.environ) == before, 'db': d.defs.resources['duckdb'].database}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HSI_ENV_FILE", "HSI_DUCKDB_PATH", "LLAMA_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"same": True, "db": "from-file.duckdb"}
    assert "LLAMA_API_KEY is set in the settings file but not in this process's environment" in done.stderr
    assert "sk-file-only" not in done.stdout + done.stderr


def test_configuration_warnings_name_a_dagster_dotenv_with_settings_and_a_key_missing_from_the_environment(
    tmp_path,
):
    from hsi_dagster.definitions import configuration_warnings
    from hsi_dagster.settings import load_settings

    settings = load_settings(os.devnull)
    assert configuration_warnings(settings, {}, str(tmp_path)) == []
    (tmp_path / ".env").write_text("HSI_INBOX_DIR=x\nOTHER=1\n")
    (warning,) = configuration_warnings(settings, {}, str(tmp_path))
    assert "sets HSI_INBOX_DIR" in warning and "OVER the process environment" in warning and "hsi.env" in warning
    keyed = load_settings(os.devnull, LLAMA_API_KEY="sk-1")
    assert len(configuration_warnings(keyed, {}, str(tmp_path))) == 2
    assert len(configuration_warnings(keyed, {"LLAMA_API_KEY": "sk-1"}, str(tmp_path))) == 1


def test_every_launch_path_runs_the_steps_in_the_run_process():
    """#16 item 3: `dagster asset materialize`, `dg launch --assets`, the UI's Materialize button and asset backfills
    run the implicit asset job; it, and every job, uses the in-process executor (steps wait on HTTP: a process per
    step would cost seconds per batch)."""
    import dagster as dg

    from hsi_dagster.definitions import defs

    repo = defs.get_repository_def()
    pipeline_keys = {dg.AssetKey(name) for name in LINEAGE}
    implicit = repo.get_implicit_job_def_for_assets(pipeline_keys)
    assert implicit is not None and implicit.executor_def.name == "in_process"
    executors = {job.name: job.executor_def.name for job in repo.get_all_jobs()}
    assert "__ASSET_JOB" in executors and "batch_pipeline" in executors
    assert set(executors.values()) == {"in_process"}, executors
