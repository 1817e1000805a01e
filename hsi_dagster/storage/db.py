"""Short-lived DuckDB connections, queued by a lock file so that two processes never collide on the database.

DuckDB admits one read-write process per file, and no read-only process while a writer has it open: a second
process fails at once with "Could not set lock on file". So every connection here first takes `fcntl.flock` on a
sidecar file `<db>.lock` (shared for read-only, exclusive for read-write), opens DuckDB only once it has it, and
lets go after closing DuckDB. Writers and readers of different processes queue on that lock instead of colliding,
and the queue is bounded: past `wait_seconds` a `DatabaseBusy` names the file.

Inside one process DuckDB shares one database instance between connections, so the lock is per process and
re-entrant: a connection opened while this process already holds the lock joins it (a read-only request under a
write lock gets a read-write connection, as DuckDB requires). A thread that holds a read-only connection and asks
for a write connection would wait for itself: that raises `NestedWriteError` at once instead of hanging.

Every writer (CLI, Dagster steps, sensors) opens a connection, does one short transaction and closes it, so a
competing process waits milliseconds. Dagster code reaches this through `HsiDuckDBResource.get_connection`; the CLI
calls `connect`.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from hsi_dagster.storage.schema import migrate

LOCK_WAIT_SECONDS = 60.0
_POLL_FIRST, _POLL_MAX = 0.001, 0.01  # seconds between tries of a lock another process holds


class DatabaseNotFound(FileNotFoundError):
    """A read-only connection was asked for a DuckDB file that does not exist yet (nothing ingested)."""


class DatabaseBusy(duckdb.IOException):
    """The database could not be opened within the wait: another process held it (the message names the file)."""


class NestedWriteError(RuntimeError):
    """A thread asked for a write connection while it holds a read-only one to the same file (it would wait for
    itself): close the read-only connection first."""


def lock_path(path: str | os.PathLike[str]) -> str:
    return f"{os.fspath(path)}.lock"


def written_files(path: str | os.PathLike[str]) -> tuple[str, str]:
    """The files a committed write changes (the database and its write-ahead log): their modification times tell
    a watcher that something was written, without opening the database."""
    return os.fspath(path), f"{os.fspath(path)}.wal"


@dataclass
class _ProcessLock:
    """This process's hold on one database's lock file: shared or exclusive, and who in the process uses it."""

    condition: threading.Condition = field(default_factory=threading.Condition)
    fd: int | None = None
    exclusive: bool = False
    holders: Counter[int] = field(default_factory=Counter)  # thread id -> open connections


_LOCKS: dict[str, _ProcessLock] = {}
_LOCKS_GUARD = threading.Lock()


def _process_lock(path: str) -> _ProcessLock:
    key = os.path.realpath(path)
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(key, _ProcessLock())


def _busy(path: str, wait_seconds: float, why: str) -> DatabaseBusy:
    return DatabaseBusy(
        f"DuckDB file {path} stayed busy for {wait_seconds:g} s: {why} (lock file {lock_path(path)}; "
        f"`fuser -v {lock_path(path)}` shows who holds it)"
    )


def _flock(fd: int, exclusive: bool, path: str, deadline: float, wait_seconds: float) -> None:
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    delay = _POLL_FIRST
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise _busy(path, wait_seconds, "another process kept it open") from None
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)


@contextmanager
def database_lock(path: str | os.PathLike[str], *, read_only: bool, wait_seconds: float = LOCK_WAIT_SECONDS):
    """Hold `<path>.lock` (shared when read_only, else exclusive) for the block; re-entrant within the process.

    Yields whether the process holds it exclusively (a read-only request under a write lock: True).
    """
    path = os.fspath(path)
    state = _process_lock(path)
    me = threading.get_ident()
    deadline = time.monotonic() + wait_seconds
    with state.condition:
        while state.holders and not state.exclusive and not read_only:
            if state.holders[me]:
                raise NestedWriteError(
                    f"this thread holds a read-only connection to {path} and asked for a write connection: "
                    "close the read-only one first (DuckDB cannot open one file in two modes in one process)"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _busy(path, wait_seconds, "other threads of this process kept reading it")
            state.condition.wait(remaining)  # other threads of this process are reading: wait for them
        if not state.holders:
            if not read_only:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDWR | os.O_CREAT if not read_only else os.O_RDONLY | os.O_CREAT
            try:
                fd = os.open(lock_path(path), flags | os.O_CLOEXEC, 0o666)
            except PermissionError:
                fd = os.open(lock_path(path), os.O_RDONLY | os.O_CLOEXEC)
            try:
                _flock(fd, not read_only, path, deadline, wait_seconds)
            except BaseException:
                os.close(fd)
                raise
            state.fd, state.exclusive = fd, not read_only
        state.holders[me] += 1
        exclusive = state.exclusive
    try:
        yield exclusive
    finally:
        with state.condition:
            state.holders[me] -= 1
            if state.holders[me] <= 0:
                del state.holders[me]
            if not state.holders and state.fd is not None:
                os.close(state.fd)  # closing the descriptor releases the flock
                state.fd, state.exclusive = None, False
                state.condition.notify_all()


def open_connection(
    path: str | os.PathLike[str], *, read_only: bool = False, config: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, for a caller that holds `database_lock` (or a ":memory:" database): no waiting here.

    DuckDB's own lock refusing us while we hold the lock file means a program outside this protocol (the duckdb
    CLI, a notebook) has the file open: DatabaseBusy says so.
    """
    path = os.fspath(path)
    if path != ":memory:" and not read_only:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    options = dict(config or {})
    try:
        return duckdb.connect(path, read_only=read_only, config=options)
    except duckdb.ConnectionException as exc:
        # This process already holds the file read-write: DuckDB shares that instance, so a read-only
        # connection has to take the same mode.
        if read_only and "different configuration" in str(exc):
            return duckdb.connect(path, read_only=False, config=options)
        raise
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise
        raise DatabaseBusy(
            f"DuckDB file {path} is open in a program that does not take {lock_path(path)} (the duckdb CLI, a "
            f"notebook?): close it there. DuckDB said: {exc}"
        ) from None


@contextmanager
def connect(
    path: str | os.PathLike[str],
    *,
    read_only: bool = False,
    wait_seconds: float = LOCK_WAIT_SECONDS,
    config: Mapping[str, Any] | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A migrated read-write connection, or a plain read-only one, under the file's lock; closed on exit.

    Read-only never migrates and never creates the file: a missing file raises DatabaseNotFound.
    """
    in_memory = str(path) == ":memory:"
    if read_only and not in_memory and not Path(path).exists():
        raise DatabaseNotFound(f"no database at {path} yet: nothing ingested (run `hsi ingest` first)")
    lock = nullcontext() if in_memory else database_lock(path, read_only=read_only, wait_seconds=wait_seconds)
    with lock:
        conn = open_connection(path, read_only=read_only, config=config)
        try:
            if not read_only:
                migrate(conn)
            yield conn
        finally:
            conn.close()
