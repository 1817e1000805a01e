"""#15 item 3: concurrent runs writing one DuckDB file never collide, because they cannot.

DuckDB admits one read-write process per file and fails a second one at once ("Could not set lock on file").
storage/db.py makes every connection take `<db>.lock` first (shared for readers, exclusive for writers), so
processes queue on it; there is no retry loop to hide a collision. Here 4 processes run the whole batch pipeline
(real Dagster runs, the REAL embedded llama.cpp server) while an ingest process writes quarantine rows and 2 reader
processes query the tables. Each process counts DuckDB lock errors (must be 0) and the times it found the lock file
taken (must be > 0 overall, else the processes never competed and the test proves nothing).
"""

from __future__ import annotations

import multiprocessing
import time

import dagster as dg
import pytest

from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.ledger import ledger
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick

pytestmark = [pytest.mark.llm, pytest.mark.slow]
RUN_PROCESSES = 4
BATCHES_PER_PROCESS = 1  # four runs at once already queue on the lock file; a second round proves nothing more
READERS = 2
BAD_LINES = 40
STARTUP_S = 300  # a child importing Dagster on a loaded 2-core machine


def _count_collisions():
    """Wrap duckdb.connect and fcntl.flock as storage/db.py calls them: DuckDB lock errors, and lock-file waits."""
    import duckdb

    from hsi_dagster.storage import db

    counts = {"lock_errors": 0, "lock_waits": 0}
    real_connect, real_flock = duckdb.connect, db.fcntl.flock

    def connect(*args, **kwargs):
        try:
            return real_connect(*args, **kwargs)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                counts["lock_errors"] += 1
            raise

    def flock(fd, operation):
        try:
            return real_flock(fd, operation)
        except BlockingIOError:
            counts["lock_waits"] += 1
            raise

    db.duckdb.connect = connect
    db.fcntl.flock = flock
    return counts


def _run_batches(db: str, url: str, batch_ids: list[str], start, results) -> None:
    """Child: the whole pipeline for each batch, one real Dagster run after another."""
    counts = _count_collisions()
    try:
        from hsi_dagster.assets.assessments import risk_assessments
        from hsi_dagster.assets.batches import detection_batches
        from hsi_dagster.assets.contexts import enriched_contexts
        from hsi_dagster.assets.prompts import budgeted_prompts
        from hsi_dagster.partitions import BATCH_PARTITIONS_NAME

        pipeline = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
        res = resources(db, url)
        ok = 0
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, batch_ids)
            start.wait(STARTUP_S)
            for batch_id in batch_ids:
                result = dg.materialize(
                    pipeline, partition_key=batch_id, instance=instance, resources=res, raise_on_error=False
                )
                ok += result.success
        results.put(("run", ok, counts, None))
    except BaseException as exc:  # report, do not hang the parent
        results.put(("run", 0, counts, f"{type(exc).__name__}: {exc}"))


def _ingest_bad_lines(db: str, start, results) -> None:
    """Child: a writer of another kind, ingest, one line per transaction (every line bad, so it is quarantined)."""
    counts = _count_collisions()
    try:
        start.wait(STARTUP_S)
        for n in range(BAD_LINES):
            ingest_lines(db, [f'{{"detection_id": "bad-{n}"}}'], source=f"bad-{n}.jsonl")
        results.put(("ingest", BAD_LINES, counts, None))
    except BaseException as exc:
        results.put(("ingest", 0, counts, f"{type(exc).__name__}: {exc}"))


def _read(db: str, start, stop, results) -> None:
    """Child: read-only queries in a loop until the writers are done."""
    counts = _count_collisions()
    try:
        from hsi_dagster.storage.db import connect

        reads = 0
        start.wait(STARTUP_S)
        while not stop.is_set():
            with connect(db, read_only=True) as conn:
                conn.execute("SELECT count(*) FROM detections, risk_assessments").fetchone()
            reads += 1
            time.sleep(0.01)
        results.put(("read", reads, counts, None))
    except BaseException as exc:
        results.put(("read", 0, counts, f"{type(exc).__name__}: {exc}"))


def test_four_concurrent_runs_and_readers_share_one_duckdb_file_without_a_lock_error(llama_server, tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    cameras = [f"cam{n}" for n in range(RUN_PROCESSES)]
    ingest_lines(db, closed_windows(cameras, BATCHES_PER_PROCESS, start=hours_ago(2)))
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, resources(db), None)
    batch_ids = sorted(request.partition_key for request in tick.run_requests)
    assert len(batch_ids) == RUN_PROCESSES * BATCHES_PER_PROCESS

    ctx = multiprocessing.get_context("spawn")
    # Every child imports Dagster, then waits at the barrier with this process: all start together, whatever the load.
    start = ctx.Barrier(RUN_PROCESSES + 1 + READERS + 1)
    stop, results = ctx.Event(), ctx.Queue()
    writers = [
        ctx.Process(target=_run_batches, args=(db, llama_server.url, batch_ids[n::RUN_PROCESSES], start, results))
        for n in range(RUN_PROCESSES)
    ]
    writers.append(ctx.Process(target=_ingest_bad_lines, args=(db, start, results)))
    readers = [ctx.Process(target=_read, args=(db, start, stop, results)) for _ in range(READERS)]
    for proc in writers + readers:
        proc.start()
    start.wait(STARTUP_S)
    started = time.monotonic()
    outcomes = [results.get(timeout=300) for _ in writers]
    seconds = time.monotonic() - started
    stop.set()
    outcomes += [results.get(timeout=60) for _ in readers]
    for proc in writers + readers:
        proc.join(60)
        assert proc.exitcode == 0

    assert [error for *_, error in outcomes if error] == []
    done = {kind: sum(n for k, n, *_ in outcomes if k == kind) for kind in ("run", "ingest", "read")}
    assert done["run"] == len(batch_ids) and done["ingest"] == BAD_LINES and done["read"] > 0
    lock_errors = sum(counts["lock_errors"] for _, _, counts, _ in outcomes)
    lock_waits = sum(counts["lock_waits"] for _, _, counts, _ in outcomes)
    assert lock_errors == 0
    assert lock_waits > 0  # the processes really competed for the file
    after = ledger(db)
    after.assert_complete()
    assert (after.batches, after.assessments, after.quarantined) == (len(batch_ids), len(batch_ids), BAD_LINES)
    assert after.detections_in == 2 * len(batch_ids) + BAD_LINES
    print(
        f"\n{RUN_PROCESSES} run processes + 1 ingest + {READERS} readers in {seconds:.1f} s: {done}, "
        f"lock errors {lock_errors}, lock-file waits {lock_waits}; ledger {after.row()}"
    )
