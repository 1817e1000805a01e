"""The live path through the sensors alone (#17 acceptance): a short live stream written into the inbox while a REAL
`dagster-daemon` and code server (as `dagster dev` and the production compose file run them) and the real embedded
llama.cpp server run. No `hsi process`, no `hsi ingest`: inbox_sensor loads the files and plans the windows, the
daemon's queue runs them. Every window of the stream must come back assessed exactly once, with all its
detections (none split off by a late file), and nothing lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance import InstanceRef

from hsi_dagster.core.intake.batching import BatchRules, assign_batches
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.sensors.inbox_archive import where_now
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.storage.db import DatabaseNotFound, connect
from hsi_dagster.synthetic.live import simulate_live
from tests.support.dagster_procs import start_code_server
from tests.support.llm_fixtures import RunningLlama
from tests.support.processes import start_logged, stop_group
from tests.support.records import detection_ref

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RATE, SECONDS, SEED = 1.0, 30, 5  # some 20-30 files on up to 3 cameras (the stream depends on the clock)
SETTINGS = {
    "NEMOTRON_MAX_OUTPUT_TOKENS": "256",
    "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    "BATCH_IDLE_TIMEOUT_SECONDS": "10",  # windows close 10 s after their last detection: a short test
    "BATCH_WINDOW_SECONDS": "30",
}
STARTUP_S, SETTLE_S = 240, 180  # for a loaded 2-core machine; waits end when their condition holds

pytestmark = [pytest.mark.llm, pytest.mark.slow]


def _stored(db: Path) -> dict:
    """Batches (with their detection count), assessments and unassigned detections, read-only."""
    try:
        with connect(db, read_only=True, wait_seconds=30) as conn:
            batches = dict(
                conn.execute(
                    "SELECT b.batch_id, count(d.detection_id) FROM detection_batches b "
                    "LEFT JOIN detections d USING (batch_id) GROUP BY b.batch_id"
                ).fetchall()
            )
            assessed = [row[0] for row in conn.execute("SELECT batch_id FROM risk_assessments").fetchall()]
            detections = conn.execute("SELECT count(*), count(*) FILTER (WHERE batch_id IS NULL) FROM detections")
            total, unassigned = detections.fetchone() or (0, 0)
            quarantined = (conn.execute("SELECT count(*) FROM quarantine").fetchone() or (0,))[0]
    except DatabaseNotFound:
        return {"batches": {}, "assessed": [], "detections": 0, "unassigned": 0, "quarantined": 0}
    return {
        "batches": batches,
        "assessed": assessed,
        "detections": total,
        "unassigned": unassigned,
        "quarantined": quarantined,
    }


def test_live_stream_every_window_assessed_exactly_once_through_the_sensors(
    llama_server: RunningLlama, tmp_path: Path
) -> None:
    home, inbox, db = tmp_path / "dagster_home", tmp_path / "inbox", tmp_path / "hsi.duckdb"
    home.mkdir()
    inbox.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {name: value for name, value in os.environ.items() if name not in HsiSettings.model_fields}
    env.update(
        DAGSTER_HOME=str(home),
        HSI_ENV_FILE=os.devnull,
        HSI_DUCKDB_PATH=str(db),
        HSI_INBOX_DIR=str(inbox),
        LLAMA_SERVER_URL=llama_server.url,
        CTX_SIZE=str(llama_server.settings.CTX_SIZE),
        PARALLEL=str(llama_server.settings.PARALLEL),
        PYTHONUNBUFFERED="1",
        DAGSTER_DISABLE_TELEMETRY="1",
        **SETTINGS,
    )
    settings = load_settings(os.devnull, **{k: env[k] for k in (*SETTINGS, "CTX_SIZE", "PARALLEL")})
    subprocess.run(  # the pool limits `hsi` sets on its instance (llama_slots = PARALLEL)
        [sys.executable, "-c", "from hsi_dagster.cli.instance import get_instance; "
         "from hsi_dagster.settings import load_settings; get_instance(load_settings())"],
        env=env, cwd=tmp_path, check=True, timeout=120,
    )  # fmt: skip
    port = free_port()
    (tmp_path / "workspace.yaml").write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: hsi_dagster\n"
    )
    code_log, daemon_log = tmp_path / "code-server.log", tmp_path / "daemon.log"
    started = time.monotonic()
    code_server = start_code_server(
        ["-m", "hsi_dagster.definitions", "--location-name", "hsi_dagster"], port, env, tmp_path, code_log, STARTUP_S
    )
    daemon = start_logged(
        [str(BIN / "dagster-daemon"), "run", "-w", str(tmp_path / "workspace.yaml")], env, tmp_path, daemon_log
    )
    files: list[Path] = []
    try:
        while "sensor: inbox_sensor" not in daemon_log.read_text(errors="replace"):
            assert daemon.poll() is None and code_server.poll() is None, daemon_log.read_text(errors="replace")[-3000:]
            assert time.monotonic() - started < STARTUP_S, "the daemon never ticked inbox_sensor"
            time.sleep(0.5)
        writer = threading.Thread(target=lambda: files.extend(simulate_live(inbox, RATE, SECONDS, SEED)))
        writer.start()
        writer.join(SECONDS + 60)
        # inbox_sensor moves each file it has loaded to <inbox>/.processed/ (sensors/inbox_archive.py)
        records = [json.loads(line) for f in files for line in where_now(f).read_text().splitlines() if line.strip()]
        refs = [detection_ref(r) for r in records]
        windows = assign_batches(refs, BatchRules.from_settings(settings))
        assert len(windows) >= 2, f"the stream should have a few windows, got {len(windows)}"
        expected = {w.batch_id: len(w.detection_ids) for w in windows}
        last_close = max(w.closes_at.timestamp() for w in windows)
        stored = _stored(db)
        deadline = time.monotonic() + SETTLE_S
        while time.time() < last_close or set(stored["assessed"]) < set(expected):
            assert daemon.poll() is None and code_server.poll() is None, daemon_log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"not all windows assessed: {stored} vs {expected}"
            time.sleep(2)
            stored = _stored(db)
        time.sleep(6)  # a tick after the last assessment: nothing more may come
        stored = _stored(db)
    finally:
        stop_group(daemon)
        stop_group(code_server, grace_s=5)  # it waits up to 60 s for open RPC calls; it keeps no state
    assert stored["detections"] == len(records) and stored["unassigned"] == 0 and stored["quarantined"] == 0
    assert stored["batches"] == expected  # every window, with all its detections: none split by a late file
    assert sorted(stored["assessed"]) == sorted(expected)  # one row each (batch_id is the key)
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        runs = instance.get_run_records(filters=dg.RunsFilter(job_name="batch_pipeline"))
        by_partition: dict[str, list[str]] = {}
        for record in runs:
            run = record.dagster_run
            by_partition.setdefault(run.tags.get("dagster/partition", ""), []).append(run.status.value)
        assert by_partition == {batch_id: ["SUCCESS"] for batch_id in expected}  # one run each, sensors only
        assert not instance.get_run_records(filters=dg.RunsFilter(job_name="ingest_detections"))  # loaded in ticks
        loaded = instance.fetch_materializations(dg.AssetKey("detections"), limit=1000).records
        reported = [Path(p).name for r in loaded for p in r.asset_materialization.metadata["files"].value]
        assert sorted(reported) == sorted(f.name for f in files)  # each file reported once
