"""DuckDB schema (contract section 3): migrations, the contract's tables and columns, replace-not-duplicate writes,
unassessed_batches(), and two processes writing one file through storage.db.connect."""

from __future__ import annotations

import json
import multiprocessing
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from hsi_dagster.storage import schema
from hsi_dagster.storage.db import DatabaseNotFound, connect
from hsi_dagster.storage.pipeline_tables import (
    count_assessments,
    load_context_json,
    load_prompt,
    save_assessment,
    save_context,
    save_prompt,
    unassessed_batches,
)
from tests.support.contract import CONTRACT_COLUMNS

# Columns the contract calls JSON.
CONTRACT_JSON_COLUMNS = {
    ("detections", "enrichment"),
    ("enriched_contexts", "context"),
    ("budgeted_prompts", "messages"),
}

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def _columns(conn) -> dict[str, dict[str, str]]:
    tables: dict[str, dict[str, str]] = {}
    for table, column, data_type in conn.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'main'"
    ).fetchall():
        tables.setdefault(table, {})[column] = data_type
    return tables


def _add_batch(
    conn,
    batch_id: str,
    camera_id: str = "front_door",
    *,
    recorded_at: datetime = T0,
    close_reason: str = "window",
    labels: tuple[str, ...] = ("car",),
) -> None:
    conn.execute(
        "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
        " detection_count, detection_ids, labels, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            batch_id,
            camera_id,
            T0,
            T0,
            T0 + timedelta(seconds=30),
            close_reason,
            1,
            [f"{batch_id}-d1"],
            list(labels),
            recorded_at,
        ],
    )


# ------------------------------------------------------------------------------------------------ migrations
def test_migrate_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    conn = duckdb.connect(str(path))
    try:
        first = schema.migrate(conn)
        tables_after_first = _columns(conn)
        second = schema.migrate(conn)
        assert first == second == schema.LATEST_VERSION
        assert _columns(conn) == tables_after_first
        rows = conn.execute(
            "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version"
        ).fetchall()
        assert rows == [(version, 1) for version, _, _ in schema.MIGRATIONS]
    finally:
        conn.close()
    # and again through storage.db.connect, in a new connection to the same file
    for _ in range(2):
        with connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(schema.MIGRATIONS)


def test_new_migration_is_applied_once_and_a_failing_one_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = duckdb.connect(str(tmp_path / "hsi.duckdb"))
    try:
        schema.migrate(conn)
        base = list(schema.MIGRATIONS)
        monkeypatch.setattr(schema, "MIGRATIONS", base + [(999, "extra", "CREATE TABLE extra_table (x INTEGER)")])
        monkeypatch.setattr(schema, "LATEST_VERSION", 999)
        assert schema.migrate(conn) == 999
        assert schema.migrate(conn) == 999  # CREATE TABLE without IF NOT EXISTS would fail if it ran twice
        assert conn.execute("SELECT count(*) FROM schema_migrations WHERE version = 999").fetchone()[0] == 1

        broken = "CREATE TABLE half_done (x INTEGER); SELECT * FROM no_such_table"
        monkeypatch.setattr(schema, "MIGRATIONS", base + [(999, "extra", ""), (1000, "broken", broken)])
        with pytest.raises(duckdb.Error):
            schema.migrate(conn)
        assert conn.execute("SELECT count(*) FROM schema_migrations WHERE version = 1000").fetchone()[0] == 0
        tables = {row[0] for row in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert "half_done" not in tables
    finally:
        conn.close()


def test_every_contract_table_and_column_exists(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        tables = _columns(conn)
    for table, columns in CONTRACT_COLUMNS.items():
        assert table in tables, f"table {table} missing"
        assert set(columns) - set(tables[table]) == set(), f"{table} lacks contract columns"
    for table, column in CONTRACT_JSON_COLUMNS:
        assert tables[table][column] == "JSON", f"{table}.{column} should be JSON, is {tables[table][column]}"


def test_connect_creates_parent_directory_and_read_only_refuses_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "hsi.duckdb"
    with pytest.raises(DatabaseNotFound, match="no database at .* yet"), connect(path, read_only=True):
        pass
    assert not path.exists()
    with connect(path) as conn:
        conn.execute("INSERT INTO quarantine VALUES ('f.jsonl', 1, 'x', 'reason', now())")
    with connect(path, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
        with pytest.raises(duckdb.Error):
            conn.execute("INSERT INTO quarantine VALUES ('f.jsonl', 2, 'x', 'reason', now())")


# ------------------------------------------------------------------------------------- replace, not duplicate
def test_save_context_replaces(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        save_context(conn, "b1", json.dumps({"v": 1}), "full", [])
        save_context(conn, "b1", json.dumps({"v": 2}), "minimal", ["clip", "pose"])
        save_context(conn, "b2", json.dumps({"v": 9}), "full", [])
        rows = conn.execute(
            "SELECT batch_id, quality_level, missing_enrichment FROM enriched_contexts ORDER BY batch_id"
        ).fetchall()
        assert rows == [("b1", "minimal", ["clip", "pose"]), ("b2", "full", [])]
        assert json.loads(load_context_json(conn, "b1")) == {"v": 2}
        with pytest.raises(LookupError, match="no enriched context for batch nope"):
            load_context_json(conn, "nope")


def test_save_prompt_replaces(tmp_path: Path) -> None:
    def save(conn, content: str, estimate: int, removed: list[str]) -> None:
        save_prompt(
            conn,
            "b1",
            messages=[{"role": "user", "content": content}],
            tokens_estimate=estimate,
            tokens_before=estimate + 100,
            budget=14000,
            budget_source="server",
            utilization=estimate / 14000,
            sections_removed=removed,
            static_prefix_sha256="abc",
        )

    with connect(tmp_path / "hsi.duckdb") as conn:
        save(conn, "first", 1000, [])
        save(conn, "second ü", 2000, ["pose"])
        assert conn.execute("SELECT count(*) FROM budgeted_prompts").fetchone()[0] == 1
        prompt = load_prompt(conn, "b1")
        assert prompt == {
            "messages": [{"role": "user", "content": "second ü"}],
            "prompt_tokens_estimate": 2000,
            "context_budget": 14000,
            "budget_source": "server",
            "context_utilization": pytest.approx(2000 / 14000),
            "sections_removed": ["pose"],
        }
        with pytest.raises(LookupError, match="no budgeted prompt for batch b9"):
            load_prompt(conn, "b9")


def test_save_assessment_replaces(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        save_assessment(
            conn,
            {
                "batch_id": "b1",
                "camera_id": "front_door",
                "status": "invalid_output",
                "raw_output": "not json",
                "assessment": None,
            },
        )
        save_assessment(
            conn,
            {
                "batch_id": "b1",
                "camera_id": "front_door",
                "status": "ok",
                "risk_score": 72,
                "risk_level": "high",
                "summary": "person at night",
                "assessment": {"risk_score": 72},
                "sections_removed": ["clip"],
            },
        )
        assert count_assessments(conn, "b1") == 1
        row = conn.execute(
            "SELECT status, risk_score, risk_level, raw_output, assessment, sections_removed, assessed_at"
            " FROM risk_assessments"
        ).fetchone()
        assert row[:4] == ("ok", 72, "high", None)  # nothing of the replaced row survives
        assert json.loads(row[4]) == {"risk_score": 72}
        assert row[5] == ["clip"]
        assert row[6] is not None  # assessed_at defaulted to now


# ------------------------------------------------------------------------------------------------ unassessed_batches
def test_unassessed_batches(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        assert unassessed_batches(conn) == {}
        _add_batch(conn, "late", recorded_at=T0 + timedelta(seconds=20))
        _add_batch(conn, "early", recorded_at=T0)
        _add_batch(conn, "done_ok", recorded_at=T0 + timedelta(seconds=5))
        _add_batch(conn, "done_failed", recorded_at=T0 + timedelta(seconds=6))
        save_assessment(conn, {"batch_id": "done_ok", "camera_id": "front_door", "status": "ok"})
        save_assessment(conn, {"batch_id": "done_failed", "camera_id": "front_door", "status": "invalid_output"})
        # an assessment whose batch was never recorded does not appear either
        save_assessment(conn, {"batch_id": "orphan", "camera_id": "front_door", "status": "ok"})
        pending = unassessed_batches(conn)
    assert list(pending) == ["early", "late"]  # oldest first; any stored status counts as assessed
    assert pending["early"] == pytest.approx(T0.timestamp())
    assert pending["late"] == pytest.approx(T0.timestamp() + 20)


# ------------------------------------------------------------------------------------------------ two processes
TRANSACTIONS_PER_PROCESS = 25


def _writer(path: str, name: str, start, results) -> None:
    """Child process: many short transactions, each on its own connection, counting DuckDB lock conflicts (there
    must be none: the lock file queues the processes) and the times it found the lock file taken (it waited)."""
    import duckdb as child_duckdb

    from hsi_dagster.storage import db

    conflicts = waits = 0
    real_connect, real_flock = child_duckdb.connect, db.fcntl.flock

    def counting_connect(*args, **kwargs):
        nonlocal conflicts
        try:
            return real_connect(*args, **kwargs)
        except child_duckdb.IOException:
            conflicts += 1
            raise

    def counting_flock(fd, operation):
        nonlocal waits
        try:
            return real_flock(fd, operation)
        except BlockingIOError:
            waits += 1
            raise

    db.duckdb.connect = counting_connect
    db.fcntl.flock = counting_flock
    try:
        start.wait(30)
        for i in range(TRANSACTIONS_PER_PROCESS):
            with db.connect(path) as conn:
                conn.execute("BEGIN TRANSACTION")
                counter = conn.execute("SELECT n FROM counter").fetchone()[0]
                conn.execute("INSERT INTO quarantine VALUES (?, ?, 'raw', 'concurrency test', now())", [name, i])
                time.sleep(0.002)  # hold the file a little so the other process has to wait
                conn.execute("UPDATE counter SET n = ?", [counter + 1])
                conn.execute("COMMIT")
        results.put((name, "ok", conflicts, waits))
    except BaseException as exc:  # report, do not hang the parent
        results.put((name, f"{type(exc).__name__}: {exc}", conflicts, waits))


def test_two_processes_write_one_file_without_losing_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.duckdb")
    with connect(path) as conn:
        conn.execute("CREATE TABLE counter (n INTEGER)")
        conn.execute("INSERT INTO counter VALUES (0)")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, name, start, results)) for name in ("proc_a", "proc_b")]
    for proc in procs:
        proc.start()
    time.sleep(0.3)
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    assert [(name, status) for name, status, _, _ in outcomes] == [("proc_a", "ok"), ("proc_b", "ok")]
    # the processes really competed for the file (else this test would prove nothing about the lock wait), and
    # never collided in DuckDB: they queued on the lock file
    assert sum(waits for *_, waits in outcomes) > 0
    assert sum(conflicts for _, _, conflicts, _ in outcomes) == 0
    with connect(path, read_only=True) as conn:
        per_process = dict(
            conn.execute("SELECT source, count(DISTINCT line_no) FROM quarantine GROUP BY source").fetchall()
        )
        counter = conn.execute("SELECT n FROM counter").fetchone()[0]
    assert per_process == {"proc_a": TRANSACTIONS_PER_PROCESS, "proc_b": TRANSACTIONS_PER_PROCESS}
    assert counter == 2 * TRANSACTIONS_PER_PROCESS  # no read-modify-write was lost
