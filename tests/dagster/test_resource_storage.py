"""HsiDuckDBResource.get_connection on real DuckDB files: migrations on write connections only, read-only
connections that cannot write or create the file, the wait for another process's lock, and use from an asset."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.storage.db import DatabaseBusy, DatabaseNotFound, connect
from hsi_dagster.storage.schema import LATEST_VERSION


def _tables(conn: duckdb.DuckDBPyConnection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def test_write_connection_creates_and_migrates_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "hsi.duckdb"
    with HsiDuckDBResource(database=str(path)).get_connection() as conn:
        assert {"detections", "detection_batches", "risk_assessments", "alerts"} <= _tables(conn)
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == LATEST_VERSION
    assert path.exists()
    with pytest.raises(duckdb.ConnectionException):  # closed on exit
        conn.execute("SELECT 1")


def test_read_only_connection_cannot_write(tmp_path: Path) -> None:
    resource = HsiDuckDBResource(database=str(tmp_path / "hsi.duckdb"))
    with resource.get_connection() as conn:
        conn.execute("INSERT INTO quarantine VALUES ('f.jsonl', 1, 'x', 'reason', now())")
    with resource.get_connection(read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
        with pytest.raises(duckdb.InvalidInputException, match="read-only"):
            conn.execute("INSERT INTO quarantine VALUES ('f.jsonl', 2, 'x', 'reason', now())")
    with resource.get_connection(read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1


def test_read_only_connection_neither_migrates_nor_creates(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "hsi.duckdb"
    resource = HsiDuckDBResource(database=str(missing))
    with pytest.raises(DatabaseNotFound, match=f"no database at {missing}"), resource.get_connection(read_only=True):
        pass
    assert not missing.parent.exists()

    bare = tmp_path / "bare.duckdb"
    duckdb.connect(str(bare)).close()  # a file that no write connection of ours has migrated
    with HsiDuckDBResource(database=str(bare)).get_connection(read_only=True) as conn:
        assert _tables(conn) == set()


def test_connection_config_reaches_duckdb(tmp_path: Path) -> None:
    resource = HsiDuckDBResource(database=str(tmp_path / "hsi.duckdb"), connection_config={"threads": 1})
    with resource.get_connection() as conn:
        assert conn.execute("SELECT current_setting('threads')").fetchone()[0] == 1


def _hold_write_lock(path: str, seconds: float, holding, raw: bool = False) -> None:
    """Child process: keep the file open read-write for `seconds` (DuckDB's lock is per process), through
    storage.db.connect (the lock-file protocol), or `raw`ly as a program outside it (the duckdb CLI) would."""
    with duckdb.connect(path) if raw else connect(path):
        holding.set()
        time.sleep(seconds)


def _lock_held_by_child(path: str, seconds: float, raw: bool = False):
    ctx = multiprocessing.get_context("spawn")
    holding = ctx.Event()
    child = ctx.Process(target=_hold_write_lock, args=(path, seconds, holding, raw))
    child.start()
    assert holding.wait(60), "the child process never opened the file"
    return child


@pytest.mark.parametrize("read_only", [False, True])
def test_waits_out_another_process_lock(tmp_path: Path, read_only: bool) -> None:
    path = str(tmp_path / "hsi.duckdb")
    resource = HsiDuckDBResource(database=path, lock_wait_seconds=30)
    with resource.get_connection():
        pass  # the file exists and is migrated
    child = _lock_held_by_child(path, 1.5)
    try:
        started = time.monotonic()
        with resource.get_connection(read_only=read_only) as conn:
            waited = time.monotonic() - started
            assert conn.execute("SELECT count(*) FROM detections").fetchone()[0] == 0
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert waited > 0.3  # it really waited for the child to let go (it held the file for 1.5 s)


def test_gives_up_after_lock_wait_seconds(tmp_path: Path) -> None:
    path = str(tmp_path / "hsi.duckdb")
    resource = HsiDuckDBResource(database=path, lock_wait_seconds=0.5)
    with resource.get_connection():
        pass
    child = _lock_held_by_child(path, 5)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseBusy, match=f"DuckDB file {path} stayed busy for 0.5 s"), resource.get_connection():
            pass
        assert 0.5 <= time.monotonic() - started < 4
    finally:
        child.join(30)


def test_a_program_outside_the_lock_protocol_is_named_at_once(tmp_path: Path) -> None:
    """The duckdb CLI (or a notebook) does not take `<db>.lock`: DuckDB's own lock refuses us, and the error says
    which file and why, without waiting (the lock file protocol has no retry loop)."""
    path = str(tmp_path / "hsi.duckdb")
    with connect(path):
        pass
    child = _lock_held_by_child(path, 5, raw=True)
    try:
        started = time.monotonic()
        busy = pytest.raises(DatabaseBusy, match=f"DuckDB file {path} is open in a program that does not take")
        with busy, connect(path, read_only=True):
            pass
        assert time.monotonic() - started < 2
    finally:
        child.join(30)


def test_assets_get_connections_through_dagster(tmp_path: Path) -> None:
    """The resource as Dagster binds it: a write step, then a read-only step, on one file."""

    @dg.asset
    def writes(duckdb: HsiDuckDBResource) -> None:
        with duckdb.get_connection() as conn:
            conn.execute("INSERT INTO quarantine VALUES ('f.jsonl', 1, 'x', 'reason', now())")

    @dg.asset(deps=[writes])
    def reads(duckdb: HsiDuckDBResource) -> int:
        with duckdb.get_connection(read_only=True) as conn:
            return conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]

    result = dg.materialize(
        [writes, reads], resources={"duckdb": HsiDuckDBResource(database=str(tmp_path / "hsi.duckdb"))}
    )
    assert result.success
    assert result.output_for_node("reads") == 1
