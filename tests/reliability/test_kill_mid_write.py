"""#15 item 5: `kill -9` of a process in the middle of a multi-statement write leaves no partial rows; the next run
repairs, with exactly one row per batch.

The two multi-statement writes whose half would do harm:
- ingest: a chunk's detections and its quarantined lines, in one transaction (half = some lines of a file loaded,
  the file not recorded as ingested);
- detection_batches (`record_batch`): claiming the detections for a batch (UPDATE detections SET batch_id) and
  inserting the batch row, in one transaction (half = detections claimed by a batch that does not exist: stranded,
  never batched again, never assessed).

How the kill lands mid-write, reliably and without a hook in package code: the child process wraps
`duckdb.connect` as `storage/db.py` calls it (test code, in the child only) so that the connection, when asked to
COMMIT, first writes a marker file and sleeps. Every statement of the transaction has run; the parent sees the
marker and sends SIGKILL, so the process dies holding an open transaction and the lock file.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_files
from tests.support.ledger import counts, ledger
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick

pytestmark = pytest.mark.llm
BAD_LINES = 2000


class _StallBeforeCommit:
    """A DuckDB connection that, asked to COMMIT, writes to `marker` how many writing statements (INSERT, UPDATE,
    DELETE) its transaction ran, and stalls (until the parent kills the process)."""

    def __init__(self, conn, marker: str) -> None:
        self._conn, self._marker, self._writes = conn, marker, 0

    def execute(self, query, *args, **kwargs):
        statement = query.strip().upper() if isinstance(query, str) else ""
        if statement == "BEGIN TRANSACTION":
            self._writes = 0
        elif statement.startswith(("INSERT", "UPDATE", "DELETE")):
            self._writes += 1
        elif statement == "COMMIT":
            Path(self._marker).write_text(str(self._writes))
            time.sleep(600)
        return self._conn.execute(query, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _stall_commits(marker: str) -> None:
    from hsi_dagster.storage import db

    real_connect = db.duckdb.connect
    db.duckdb.connect = lambda *args, **kwargs: _StallBeforeCommit(real_connect(*args, **kwargs), marker)


def _ingest_child(db: str, source: str, marker: str) -> None:
    _stall_commits(marker)
    ingest_files(db, [source])


def _batch_run_child(db: str, batch_id: str, marker: str) -> None:
    from hsi_dagster.assets.batches import detection_batches
    from hsi_dagster.partitions import BATCH_PARTITIONS_NAME

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [batch_id])
        _stall_commits(marker)
        dg.materialize([detection_batches], partition_key=batch_id, instance=instance, resources=resources(db))


def _kill_at_commit(target, args: tuple, marker: Path) -> int:
    """Start `target` in a new process, SIGKILL it once it stalls before COMMIT; the writes its transaction ran."""
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=target, args=(*args, str(marker)))
    started = time.monotonic()
    child.start()
    deadline = started + 120
    while not marker.exists() or not marker.read_text():
        assert child.is_alive(), f"the child ended (exit code {child.exitcode}) before it reached COMMIT"
        assert time.monotonic() < deadline, "the child never reached COMMIT"
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    writes = int(marker.read_text())
    marker.unlink()
    return writes


def _counts(db: str) -> dict[str, int]:
    return counts(
        db,
        {
            "detections": "SELECT count(*) FROM detections",
            "quarantined": "SELECT count(*) FROM quarantine",
            "files": "SELECT count(*) FROM ingested_files",
            "claimed": "SELECT count(*) FROM detections WHERE batch_id IS NOT NULL",
            "batches": "SELECT count(*) FROM detection_batches",
        },
    )


@pytest.mark.slow
def test_kill_9_mid_write_leaves_no_partial_rows_and_the_next_run_repairs(llama_server, tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    good = closed_windows(["gate"], 2, start=hours_ago(2))  # 2 closed batches, 4 detections
    source = tmp_path / "night.jsonl"
    source.write_text("\n".join(good + [f'{{"detection_id": "bad-{n}"}}' for n in range(BAD_LINES)]) + "\n")
    with connect(db):
        pass  # the file exists and is migrated, so the first COMMIT of the children is their write's

    # 1. ingest killed with its chunk written but not committed: nothing of the file is visible
    assert _kill_at_commit(_ingest_child, (db, str(source)), tmp_path / "ingest.marker") >= 2  # rows, rejects
    assert _counts(db) == {"detections": 0, "quarantined": 0, "files": 0, "claimed": 0, "batches": 0}
    # the next ingest (the lock file was released by the kernel; DuckDB rolled the transaction back) loads it whole
    report = ingest_files(db, [source])
    assert (report.loaded, report.quarantined) == (4, BAD_LINES)
    assert _counts(db) == {"detections": 4, "quarantined": BAD_LINES, "files": 1, "claimed": 0, "batches": 0}

    # 2. a Dagster run killed inside record_batch, its detections claimed but the batch row not yet committed
    res = resources(db, llama_server.url)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        batch_ids = sorted(r.partition_key for r in tick.run_requests)
        assert len(batch_ids) == 2
        assert _kill_at_commit(_batch_run_child, (db, batch_ids[0]), tmp_path / "run.marker") == 2  # claim, row
        assert _counts(db)["claimed"] == 0 and _counts(db)["batches"] == 0  # no detection stranded
        # the next runs repair: the whole pipeline for both batches, one row per batch in every table
        from hsi_dagster.assets.assessments import risk_assessments
        from hsi_dagster.assets.batches import detection_batches
        from hsi_dagster.assets.contexts import enriched_contexts
        from hsi_dagster.assets.prompts import budgeted_prompts

        pipeline = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
        for batch_id in batch_ids:
            assert dg.materialize(pipeline, partition_key=batch_id, instance=instance, resources=res).success
    after = ledger(db)
    after.assert_complete()
    assert (after.detections_in, after.batches, after.assessments, after.quarantined) == (
        4 + BAD_LINES,
        2,
        2,
        BAD_LINES,
    )
    print(f"\nkill -9 mid-write: {after.row()}")
