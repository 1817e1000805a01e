"""storage/db.py's lock file within one process: re-entrant, the modes DuckDB allows, and no self-deadlock.

Across processes: tests/storage/test_schema.py (two writers), tests/dagster/test_resource_storage.py (waits, gives
up naming the file, a program outside the protocol) and tests/reliability/test_duckdb_writers.py (4 runs + readers).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from hsi_dagster.storage import db as storage_db
from hsi_dagster.storage.db import NestedWriteError, connect, lock_path


def _held(path: str) -> tuple[int, bool]:
    state = storage_db._process_lock(path)
    return sum(state.holders.values()), state.exclusive


def test_a_read_inside_a_write_joins_it_and_both_release_the_lock_file(tmp_path: Path) -> None:
    path = str(tmp_path / "hsi.duckdb")
    with connect(path) as writer:
        assert Path(lock_path(path)).exists()
        with connect(path, read_only=True) as reader:  # DuckDB: the process's read-write instance
            writer.execute("INSERT INTO quarantine VALUES ('f', 1, 'x', 'r', now())")
            assert reader.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
            assert _held(path) == (2, True)
        assert _held(path) == (1, True)
    assert _held(path) == (0, False)


def test_a_write_inside_a_read_of_the_same_thread_fails_at_once_instead_of_waiting_for_itself(tmp_path: Path) -> None:
    path = str(tmp_path / "hsi.duckdb")
    with connect(path):
        pass
    started = time.monotonic()
    with connect(path, read_only=True), pytest.raises(NestedWriteError, match=str(path)), connect(path):
        pass
    assert time.monotonic() - started < 1
    assert _held(path) == (0, False)
    with connect(path) as conn:  # nothing left held
        conn.execute("SELECT 1")


def test_a_writer_thread_waits_for_the_reader_threads_of_its_process(tmp_path: Path) -> None:
    path = str(tmp_path / "hsi.duckdb")
    with connect(path):
        pass
    reading, wrote = threading.Event(), []

    def writer() -> None:
        reading.wait(10)
        with connect(path) as conn:
            conn.execute("INSERT INTO quarantine VALUES ('f', 2, 'x', 'r', now())")
            wrote.append(time.monotonic())

    thread = threading.Thread(target=writer)
    thread.start()
    with connect(path, read_only=True) as conn:
        reading.set()
        time.sleep(0.3)
        assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
        released = time.monotonic()
    thread.join(10)
    assert wrote and wrote[0] >= released
