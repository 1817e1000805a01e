"""Short-lived DuckDB connections that wait out another process's lock instead of failing.

DuckDB admits one read-write process per file. Every writer here (CLI, Dagster steps, sensors) opens a
connection, does one short transaction and closes it, so a competing process only waits milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from hsi_dagster.storage.schema import migrate

LOCK_WAIT_SECONDS = 60.0


def _is_lock_conflict(error: Exception) -> bool:
    text = str(error)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def open_connection(
    path: str | Path, *, read_only: bool = False, wait_seconds: float = LOCK_WAIT_SECONDS
) -> duckdb.DuckDBPyConnection:
    """Connect, retrying with backoff while another process holds the file lock."""
    path = str(path)
    if path != ":memory:" and not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.ConnectionException as exc:
            # Same process already holds the file read-write: a read-only connection must share that mode.
            if read_only and "different configuration" in str(exc):
                return duckdb.connect(path, read_only=False)
            raise
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


@contextmanager
def connect(path: str | Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A migrated connection (read-write) or a plain read-only one, always closed on exit."""
    if read_only and not Path(path).exists():
        raise FileNotFoundError(f"DuckDB file {path} does not exist yet: run `hsi ingest` first")
    conn = open_connection(path, read_only=read_only)
    try:
        if not read_only:
            migrate(conn)
        yield conn
    finally:
        conn.close()
