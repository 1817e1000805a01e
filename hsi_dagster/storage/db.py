"""Short-lived DuckDB connections that wait out another process's lock instead of failing.

DuckDB admits one read-write process per file. Every writer here (CLI, Dagster steps, sensors) opens a
connection, does one short transaction and closes it, so a competing process only waits milliseconds.
Dagster code reaches this through `HsiDuckDBResource.get_connection`; the CLI calls `connect` directly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from hsi_dagster.storage.schema import migrate

LOCK_WAIT_SECONDS = 60.0


class DatabaseNotFound(FileNotFoundError):
    """A read-only connection was asked for a DuckDB file that does not exist yet (nothing ingested)."""


def _is_lock_conflict(error: Exception) -> bool:
    text = str(error)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def open_connection(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    wait_seconds: float = LOCK_WAIT_SECONDS,
    config: Mapping[str, Any] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Connect, retrying with backoff while another process holds the file lock (up to `wait_seconds`)."""
    path = os.fspath(path)
    if path != ":memory:" and not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    options = dict(config or {})
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            return duckdb.connect(path, read_only=read_only, config=options)
        except duckdb.ConnectionException as exc:
            # This process already holds the file read-write: DuckDB shares that instance, so a read-only
            # connection has to take the same mode.
            if read_only and "different configuration" in str(exc):
                return duckdb.connect(path, read_only=False, config=options)
            raise
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


@contextmanager
def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    wait_seconds: float = LOCK_WAIT_SECONDS,
    config: Mapping[str, Any] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A migrated read-write connection, or a plain read-only one; always closed on exit.

    Read-only never migrates and never creates the file: a missing file raises DatabaseNotFound.
    """
    if read_only and str(path) != ":memory:" and not Path(path).exists():
        raise DatabaseNotFound(f"no database at {path} yet: nothing ingested (run `hsi ingest` first)")
    conn = open_connection(path, read_only=read_only, wait_seconds=wait_seconds, config=config)
    try:
        if not read_only:
            migrate(conn)
        yield conn
    finally:
        conn.close()
