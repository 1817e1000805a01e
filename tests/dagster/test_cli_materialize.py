"""Acceptance (#16 item 1): on a fresh DAGSTER_HOME, `hsi ingest`, then the four batch assets of one partition
materialized from the Dagster CLI exactly as a user types it (`dagster asset materialize`, `dg launch --assets`),
against the real embedded llama.cpp server: one assessment stored per materialized batch.

The commands run from a directory without a `.env`: Dagster's CLIs load the working directory's `.env` over the
environment (#16 item 7), and the settings here come from the environment only (HSI_ENV_FILE=/dev/null).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from tests.support.pipeline_helpers import closed_windows

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PIPELINE = "group:pipeline"  # detection_batches, enriched_contexts, budgeted_prompts, risk_assessments


def _run(env: dict[str, str], cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def _assessed(db: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute("SELECT batch_id, status FROM risk_assessments ORDER BY batch_id").fetchall()


@pytest.fixture
def ingested(tmp_path, llama_server):
    """A fresh DAGSTER_HOME and DuckDB file, two closed batches (driveway, porch) ingested with `hsi ingest`."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    db = tmp_path / "hsi.duckdb"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": str(db),
        "HSI_ENV_FILE": os.devnull,
        "HSI_INBOX_DIR": str(tmp_path / "inbox"),
        "LLAMA_SERVER_URL": llama_server.url,
        "CTX_SIZE": str(llama_server.settings.CTX_SIZE),
        "PARALLEL": str(llama_server.settings.PARALLEL),
        "NEMOTRON_MAX_OUTPUT_TOKENS": "256",  # SmolLM2 on 2 shared cores: keep each reply short
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    }
    detections = tmp_path / "detections.jsonl"
    start = datetime.now(UTC) - timedelta(hours=2)
    detections.write_text("\n".join(closed_windows(["driveway", "porch"], 1, start=start)) + "\n")
    ingest = _run(env, tmp_path, str(BIN / "hsi"), "ingest", str(detections))
    assert "2 closed batches registered as Dagster partitions" in ingest.stdout, ingest.stdout
    return env, db


def test_ingest_then_dagster_asset_materialize_stores_one_assessment(tmp_path, ingested):
    env, db = ingested
    listed = _run(env, tmp_path, str(BIN / "hsi"), "batches")
    first = json.loads(_run(env, tmp_path, str(BIN / "hsi"), "batches", "--json").stdout.splitlines()[0])["batch_id"]
    # the hint `hsi batches` prints is the command, pasted as is
    (command,) = [line.strip() for line in listed.stdout.splitlines() if line.strip().startswith("dagster asset")]
    argv = shlex.split(command)
    assert argv == [
        "dagster",
        "asset",
        "materialize",
        "-m",
        "hsi_dagster.definitions",
        "--select",
        PIPELINE,
        "--partition",
        first,
    ]
    done = _run(env, tmp_path, str(BIN / argv[0]), *argv[1:], timeout=600)
    assert "Executing steps in process" in done.stdout + done.stderr  # the in-process executor (#16 item 3)
    rows = _assessed(db)
    assert [batch_id for batch_id, _ in rows] == [first]


def test_dg_launch_assets_materializes_one_partition_with_run_config(tmp_path, ingested):
    """`dg launch --assets ... --partition` from the repository root (the dg project), as the README shows it, with
    the run config a re-assessment gives (`--config-json`): the prompt gets the output room given back."""
    env, db = ingested
    listed = _run(env, tmp_path, str(BIN / "hsi"), "batches", "--json").stdout.splitlines()
    porch = next(key for key in (json.loads(line)["batch_id"] for line in listed) if key.startswith("porch__"))
    assert not (REPO / ".env").exists(), "a .env at the repository root would override this test's environment"
    op_config = {"config": {"max_output_tokens": 128}}
    run_config = {"ops": {"budgeted_prompts": op_config, "risk_assessments": op_config}}
    launch = ["launch", "--assets", PIPELINE, "--partition", porch, "--config-json", json.dumps(run_config)]
    _run(env, REPO, str(BIN / "dg"), *launch, timeout=600)
    assert [batch_id for batch_id, _ in _assessed(db)] == [porch]
    with duckdb.connect(str(db), read_only=True) as conn:
        (budget,) = conn.execute("SELECT context_budget FROM risk_assessments").fetchone()
    slot_context = int(env["CTX_SIZE"]) // int(env["PARALLEL"])  # what the server's /props reports per slot
    assert budget == slot_context - 128 - int(env["PROMPT_SAFETY_MARGIN_TOKENS"])
