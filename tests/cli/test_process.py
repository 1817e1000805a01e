"""`hsi process` on the persistent Dagster instance against the REAL embedded server: every closed batch assessed,
runs recorded where the UI reads them, and never more LLM requests in flight than the server has slots."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import closed_windows, hours_ago
from tests.support.server_watch import ServerWatcher

pytestmark = pytest.mark.llm
REPO = Path(__file__).resolve().parents[2]


def test_process_assesses_3x_parallel_batches_with_at_most_parallel_in_flight(llama_server, tmp_path):
    parallel = llama_server.settings.PARALLEL
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["a", "b", "c"], parallel, start=hours_ago(2)))  # 3 x PARALLEL windows
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "HSI_ENV_FILE": os.devnull,
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": db,
        "LLAMA_SERVER_URL": llama_server.url,
        "CTX_SIZE": "8192",
        "PARALLEL": str(parallel),
        "NEMOTRON_MAX_OUTPUT_TOKENS": "256",
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    }
    with ServerWatcher(llama_server.url) as watcher:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "hsi"), "process"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert watcher.polls > 10
    assert watcher.max_processing <= parallel and watcher.max_deferred == 0
    with duckdb.connect(db, read_only=True) as conn:
        assessed = conn.execute("SELECT count(*), count(DISTINCT batch_id) FROM risk_assessments").fetchone()
    assert assessed == (3 * parallel, 3 * parallel)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="batch_pipeline", tags={"hsi/source": "hsi process"}))
        assert len(runs) == 3 * parallel
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    # Nothing left: a second call finds no closed batch to process.
    again = subprocess.run(
        [str(Path(sys.executable).parent / "hsi"), "process"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and "0 runs" in again.stdout
