"""Bulk, idempotent loading of detection files (JSON Lines, optionally gzipped) into DuckDB.

Design (measured with bench/ingest_bench.py; the Python validator alone runs at ~10k lines/s here):
- A reader thread cuts the file into lines and checks each chunk (`storage.line_reader`: the msgspec fast check,
  then the authoritative validator on what it refuses, which loads them after all or quarantines them with the
  reason naming the field). The reader then copies the accepted lines into an in-memory DuckDB staging table
  (the one step that needs the GIL).
- Meanwhile the main thread has DuckDB (which releases the GIL, so the two overlap on two cores) parse the
  previous chunk's staged lines into a temp table (no WAL) with the checks that are cheaper vectorized
  (`ingest_checks.finish_sql`), and insert the good rows into `detections` in one transaction per chunk. The plain
  insert is tried first (one index probe per row); once a file re-sends a known detection_id it switches to
  `ON CONFLICT DO NOTHING`, so re-ingesting is a no-op. Quarantine rows are keyed by (source, line_no).

Late detections: a detection is `is_late` when, at the moment it is loaded, its camera already has a recorded
regular (not fast-path) batch closing after the detection's ts: processing had passed its time when it
arrived. It still lands in a new batch by the usual rules (see storage/batches.py).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, overload

import duckdb
import numpy as np

from hsi_dagster.core.intake.detections import (
    DEFAULT_BOUNDS,
    Bounds,
    Detection,
    Rejection,
    format_ts,
    line_too_long_reason,
    truncate_raw,
    validate_record,
)
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.history import record_activity, record_activity_rows
from hsi_dagster.storage.ingest_checks import finish_sql
from hsi_dagster.storage.line_reader import (
    READ_BLOCK_BYTES,
    CheckedChunk,
    Chunker,
    LongLine,
    check_chunk,
    open_binary,
    read_blocks,
    validate_refused,
)

CHUNK_LINES = (
    192_000  # per transaction: over a DuckDB row group (written straight to the file); measured best of 128k-256k
)


class IngestError(Exception):
    """An input file cannot be read (missing, a directory, unreadable, corrupt gzip); the message names it."""


@dataclass
class FileReport:
    """What one file (or in-memory stream) contributed."""

    source: str
    lines: int = 0
    loaded: int = 0
    duplicates: int = 0
    quarantined: int = 0
    blank_lines: int = 0
    rescued: int = 0  # refused by the fast check, accepted by the authoritative validator (diagnostic)
    cut: int = 0  # loaded with optional enrichment cut to a bound (contract section 6; listed on the row)
    skipped: bool = False  # already ingested with the same size and mtime


class _SummedOverFiles:
    """A read-only IngestReport total: the FileReport count of the same name, summed over the report's files."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, report: None, owner: type) -> _SummedOverFiles: ...
    @overload
    def __get__(self, report: IngestReport, owner: type) -> int: ...
    def __get__(self, report: IngestReport | None, owner: type) -> _SummedOverFiles | int:
        if report is None:
            return self
        return sum(getattr(f, self.name) for f in report.files)

    def __set__(self, report: IngestReport, value: object) -> None:
        raise AttributeError(f"IngestReport.{self.name} is a total over its files: change the FileReports instead")


@dataclass
class IngestReport:
    """Totals over the files of one call; `elapsed_s` is wall time."""

    files: list[FileReport] = field(default_factory=list)
    elapsed_s: float = 0.0

    # each a FileReport count summed over the files
    lines = _SummedOverFiles()
    loaded = _SummedOverFiles()
    duplicates = _SummedOverFiles()
    quarantined = _SummedOverFiles()
    blank_lines = _SummedOverFiles()
    cut = _SummedOverFiles()

    @property
    def per_file(self) -> dict[str, FileReport]:
        return {f.source: f for f in self.files}

    def summary(self) -> str:
        """Human-readable lines for the CLI."""
        out = []
        for f in self.files:
            if f.skipped:
                out.append(f"{f.source}: skipped (already ingested, unchanged)")
            else:
                out.append(
                    f"{f.source}: {f.lines} lines, {f.loaded} loaded, {f.duplicates} duplicates skipped, "
                    f"{f.quarantined} quarantined"
                    + (f", {f.cut} cut to the bounds" if f.cut else "")
                    + (f", {f.blank_lines} blank" if f.blank_lines else "")
                )
        out.append(
            f"total: {self.loaded} loaded, {self.duplicates} duplicates skipped, {self.quarantined} quarantined "
            + (f"({self.cut} loaded cut to the bounds, see detections.enrichment_cuts) " if self.cut else "")
            + f"in {self.elapsed_s:.2f}s"
        )
        return "\n".join(out)


_INSERT_SQL = """
INSERT INTO detections (detection_id, camera_id, ts, label, confidence, bbox, track_id, zone, enrichment,
                        source, line_no, ingested_at, batch_id, is_late, enrichment_cuts)
SELECT r.detection_id, r.camera_id, r.ts, r.label, r.confidence, r.bbox, r.track_id, r.zone, r.enrichment,
       $source, r.line_no, $received_at, NULL, coalesce(r.ts < p.processed_until, false), {cuts}
FROM ({rows}) r
LEFT JOIN (
    SELECT camera_id, max(closes_at) AS processed_until FROM detection_batches
    WHERE close_reason <> 'fast_path' GROUP BY camera_id
) p ON p.camera_id = r.camera_id
{dedupe}
{conflict}
"""
_DEDUPE = "QUALIFY row_number() OVER (PARTITION BY r.detection_id ORDER BY r.line_no) = 1"
_ON_CONFLICT = "ON CONFLICT DO NOTHING"

_PY_ROWS = """
SELECT line_no, detection_id, camera_id, CAST(ts AS TIMESTAMPTZ) AS ts, label, confidence,
       CAST(bbox AS DOUBLE[]) AS bbox, track_id, zone, CAST(enrichment AS JSON) AS enrichment,
       CAST(enrichment_cuts AS JSON) AS enrichment_cuts FROM _hsi_py_rows
"""


# ------------------------------------------------------------------------------------------------ loading
class _Loader:
    """Loads checked chunks of one source inside the given connection, one transaction per chunk."""

    def __init__(
        self, conn: duckdb.DuckDBPyConnection, source: str, received_at: datetime, bounds: Bounds = DEFAULT_BOUNDS
    ) -> None:
        self.conn = conn
        self.bounds = bounds
        self.report = FileReport(source)
        self.params = {"source": source, "received_at": received_at}
        self.received_at = received_at
        self.on_conflict = False  # switched on at the first chunk that re-sends known detection_ids
        self._rescued: list[tuple[int, Detection]] = []
        self._rejects: list[Rejection] = []

    def reject_now(self, rejection: Rejection) -> None:
        """A line refused before checking (over-long, not encodable); written with the next chunk."""
        self._rejects.append(rejection)
        self.report.lines += 1

    def load_chunk(self, chunk: CheckedChunk, staged: str | None = None) -> None:
        """Finish the chunk's checks in SQL (into a temp table: no WAL), then insert it in one transaction.
        `staged` names a table already holding the chunk's columns (copied by the reader thread); else they
        are copied here."""
        conn = self.conn
        self.report.lines += len(chunk.lines)
        self.report.blank_lines += chunk.blank
        self._rescued += chunk.rescued
        self._rejects += chunk.rejects
        if not len(chunk.columns["pos"]):
            self.flush()
            return
        if staged is None:
            conn.register("_hsi_columns", chunk.columns)
        try:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE _hsi_checked AS {finish_sql(staged or '_hsi_columns')}")
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {staged}") if staged else conn.unregister("_hsi_columns")
        try:
            refused = [
                pos for (pos,) in conn.execute("SELECT pos FROM _hsi_checked WHERE NOT ok ORDER BY pos").fetchall()
            ]
            validate_refused(
                chunk.lines, chunk.line_nos, refused, self.report.source, self._rescued, self._rejects, self.bounds
            )
            valid, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT detection_id) FROM _hsi_checked WHERE ok"
            ).fetchone()  # type: ignore[misc]
            inserted = self._transaction(
                lambda: self._insert("SELECT * FROM _hsi_checked WHERE ok", dedupe=distinct < valid)
            )
        finally:
            conn.execute("DROP TABLE IF EXISTS _hsi_checked")
        self.report.loaded += inserted
        self.report.duplicates += valid - inserted

    def flush(self) -> None:
        """Write rescued rows and rejects still pending (lines refused before any chunk)."""
        if self._rescued or self._rejects:
            self._transaction(lambda: 0)

    def _transaction(self, insert: Any) -> int:
        """Insert the checked rows, the rescued ones and the rejects in one transaction. The plain insert is tried
        first (one index probe per row); if a detection_id is already stored it fails, and the chunk is redone
        with ON CONFLICT DO NOTHING, which the rest of the file then keeps using."""
        conn = self.conn
        before = dataclasses.replace(self.report)
        for attempt in range(2):
            self.report = dataclasses.replace(before)
            conn.execute("BEGIN TRANSACTION")
            try:
                inserted = insert()
                if self._rescued:
                    self._insert_detections(self._rescued)
                if self._rejects:
                    self._quarantine(self._rejects)
                conn.execute("COMMIT")
                self._rescued, self._rejects = [], []
                return inserted
            except duckdb.ConstraintException:
                conn.execute("ROLLBACK")
                if self.on_conflict or attempt:
                    raise
                self.on_conflict = True
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _insert(self, rows_sql: str, *, dedupe: bool, cuts: bool = False) -> int:
        """The fast path's rows carry no cuts (it refuses anything over a bound); the validator's may."""
        sql = _INSERT_SQL.format(
            rows=rows_sql,
            dedupe=_DEDUPE if dedupe else "",
            conflict=_ON_CONFLICT if self.on_conflict else "",
            cuts="r.enrichment_cuts" if cuts else "NULL",
        )
        if self.on_conflict:  # some ids may be known already: count in camera_activity only what was inserted
            inserted = self.conn.execute(sql + "RETURNING camera_id, ts, label", self.params).fetchnumpy()
            record_activity_rows(self.conn, inserted, self.received_at)
            return len(inserted["camera_id"])
        row = self.conn.execute(sql, self.params).fetchone()  # all-or-nothing: every (first-per-id) row went in
        record_activity(self.conn, rows_sql, {"received_at": self.received_at}, first_per_id=dedupe)
        return int(row[0]) if row else 0

    def _insert_detections(self, rows: list[tuple[int, Detection]]) -> None:
        """Validator-accepted rows; those cut to a bound go in their own statement, so the ones actually loaded
        (not skipped as known) are counted."""
        cut = [row for row in rows if row[1].cuts]
        if cut:
            self._insert_validated([row for row in rows if not row[1].cuts])
            self.report.cut += self._insert_validated(cut)
        else:
            self._insert_validated(rows)

    def _insert_validated(self, rows: list[tuple[int, Detection]]) -> int:
        if not rows:
            return 0
        obj = lambda values: np.array(values, dtype=object)  # noqa: E731
        data = {
            "line_no": np.array([n for n, _ in rows], dtype=np.int64),
            "detection_id": obj([d.detection_id for _, d in rows]),
            "camera_id": obj([d.camera_id for _, d in rows]),
            "ts": obj([format_ts(d.ts) for _, d in rows]),
            "label": obj([d.label for _, d in rows]),
            "confidence": np.array([d.confidence for _, d in rows], dtype=np.float64),
            "bbox": obj([None if d.bbox is None else "[" + ",".join(repr(x) for x in d.bbox) + "]" for _, d in rows]),
            "track_id": obj([d.track_id for _, d in rows]),
            "zone": obj([d.zone for _, d in rows]),
            "enrichment": obj([d.enrichment_json() for _, d in rows]),
            "enrichment_cuts": obj([d.cuts_json() for _, d in rows]),
        }
        self.conn.register("_hsi_py_rows", data)
        try:
            inserted = self._insert(_PY_ROWS, dedupe=len({d.detection_id for _, d in rows}) < len(rows), cuts=True)
        finally:
            _unregister(self.conn, "_hsi_py_rows")
        self.report.loaded += inserted
        self.report.duplicates += len(rows) - inserted
        self.report.rescued += len(rows)
        return inserted

    def _quarantine(self, rejects: list[Rejection]) -> None:
        data = {
            "line_no": np.array([r.line_no for r in rejects], dtype=np.int64),
            "raw": np.array([storable_text(r.raw) for r in rejects], dtype=object),
            "reason": np.array([storable_text(r.reason) for r in rejects], dtype=object),
        }
        self.conn.register("_hsi_rejects", data)
        try:
            self.conn.execute(
                """INSERT INTO quarantine (source, line_no, raw, reason, received_at)
                   SELECT $source, line_no, raw, reason, $received_at FROM _hsi_rejects
                   ON CONFLICT (source, line_no) DO UPDATE SET raw = excluded.raw, reason = excluded.reason""",
                self.params,
            )
        finally:
            _unregister(self.conn, "_hsi_rejects")
        self.report.quarantined += len(rejects)


def _unregister(conn: duckdb.DuckDBPyConnection, name: str) -> None:
    """Unregister a view in a `finally`. In a transaction a failed statement aborted, unregistering fails too and
    would hide the first error (the ConstraintException that makes `_transaction` redo a chunk with ON CONFLICT,
    when a line the validator rescued re-sends an id the fast path just inserted); registering again replaces it."""
    with suppress(duckdb.TransactionException):
        conn.unregister(name)


def storable_text(text: str) -> str:
    """Text DuckDB can hold: a reason may quote a value with a lone surrogate (JSON "\\ud800"), which UTF-8 cannot
    encode and which would abort the whole chunk's transaction; it is kept as the escape `\\ud800`."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Stopped(Exception):
    """The consumer gave up (an error while loading): the reader thread ends quietly."""


def _ingest_stream(loader: _Loader, stream: BinaryIO, chunk_lines: int) -> None:
    """A reader thread cuts and checks the next chunk while DuckDB (which releases the GIL) loads this one.

    The reader also copies each chunk's Python strings into an in-memory staging table with its own cursor:
    that copy needs the GIL, which the reader holds anyway, whereas DuckDB's threads asking for it while the
    reader runs msgspec would wait out Python's switch interval once per vector (seconds per million lines).
    """
    items: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=1)
    stop = threading.Event()
    staging = f"hsi_staging_{uuid.uuid4().hex[:12]}"
    loader.conn.execute(f"ATTACH ':memory:' AS {staging}")
    cursor = loader.conn.cursor()

    def put(item: tuple[Any, ...]) -> None:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def stage(chunk: CheckedChunk) -> None:
        table = None
        if len(chunk.columns["pos"]):
            table = f"{staging}.chunk_{int(chunk.line_nos[0])}"
            cursor.register("_hsi_columns", chunk.columns)
            try:
                cursor.execute(f"CREATE TABLE {table} AS SELECT * FROM _hsi_columns")
            finally:
                cursor.unregister("_hsi_columns")
        put(("chunk", chunk, table))

    def produce() -> None:
        try:
            chunker = Chunker(loader.report.source, chunk_lines, stage, loader.bounds)
            first_block = True
            for item in read_blocks(stream, READ_BLOCK_BYTES, loader.bounds.line_bytes):
                if isinstance(item, LongLine):
                    reason = line_too_long_reason(item.size, loader.bounds)
                    raw = truncate_raw(item.head, loader.bounds.raw_chars)
                    put(("reject", Rejection(loader.report.source, item.line_no, raw, reason)))
                    continue
                line_no, lines = item
                if first_block and lines[0].startswith(b"\xef\xbb\xbf"):
                    lines[0] = lines[0][3:]  # a UTF-8 byte order mark from Windows tools
                first_block = False
                chunker.add(np.arange(line_no, line_no + len(lines), dtype=np.int64), lines)
            chunker.flush()
            put(("end",))
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the consumer, which raises it
            with suppress(_Stopped):
                put(("error", exc))

    reader = threading.Thread(target=produce, name="hsi-ingest-reader", daemon=True)
    reader.start()
    try:
        while True:
            kind, *rest = items.get()
            if kind == "chunk":
                loader.load_chunk(*rest)
            elif kind == "reject":
                loader.reject_now(rest[0])
            elif kind == "error":
                raise rest[0]
            else:
                break
        loader.flush()
    finally:
        stop.set()
        reader.join()
        cursor.close()
        loader.conn.execute(f"DETACH {staging}")


@contextmanager
def _unordered(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Let DuckDB build the temp tables in parallel (row order is not needed: every row carries its line_no)."""
    previous = conn.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0]  # type: ignore[index]
    conn.execute("SET preserve_insertion_order = false")
    try:
        yield
    finally:
        conn.execute(f"SET preserve_insertion_order = {'true' if previous else 'false'}")


def _record_file(
    conn: duckdb.DuckDBPyConnection, source: str, stat: os.stat_result, report: FileReport, at: datetime
) -> None:
    conn.execute(
        """INSERT INTO ingested_files (path, size, mtime_ns, loaded, quarantined, ingested_at)
           VALUES ($path, $size, $mtime, $loaded, $quarantined, $at)
           ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns,
               loaded = ingested_files.loaded + excluded.loaded, quarantined = excluded.quarantined,
               ingested_at = excluded.ingested_at""",
        {
            "path": source,
            "size": stat.st_size,
            "mtime": stat.st_mtime_ns,
            "loaded": report.loaded,
            "quarantined": report.quarantined,
            "at": at,
        },
    )


def already_ingested(conn: duckdb.DuckDBPyConnection, path: str | os.PathLike[str], size: int, mtime_ns: int) -> bool:
    """True if this path was ingested when it had this size and mtime (an inbox watcher skips it)."""
    row = conn.execute(
        "SELECT 1 FROM ingested_files WHERE path = ? AND size = ? AND mtime_ns = ?",
        [str(Path(path).resolve()), int(size), int(mtime_ns)],
    ).fetchone()
    return row is not None


def _check_readable(path: Path) -> os.stat_result:
    try:
        stat = path.stat()
    except OSError as exc:
        raise IngestError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not path.is_file():
        raise IngestError(f"cannot read {path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise IngestError(f"cannot read {path}: permission denied")
    return stat


def ingest_files(
    db: str | os.PathLike[str] | duckdb.DuckDBPyConnection | None,
    paths: Iterable[str | os.PathLike[str]],
    *,
    settings: Any = None,
    skip_already_ingested: bool = False,
    chunk_lines: int = CHUNK_LINES,
) -> IngestReport:
    """Validate and load JSONL (or .jsonl.gz) files; bad records are quarantined, never fatal.

    `db` is a path, a migrated read-write connection (a Dagster step's), or None for `settings.HSI_DUCKDB_PATH`.
    All paths are checked first, so a missing or unreadable one raises IngestError before anything is loaded; a
    file that turns out corrupt midway (bad gzip) raises IngestError naming it, with its earlier chunks kept
    (re-ingesting is idempotent). Each file is recorded in `ingested_files`; with `skip_already_ingested` an
    unchanged file (same size and mtime) is skipped.
    """
    started = time.perf_counter()
    if db is None:
        if settings is None:
            from hsi_dagster.settings import load_settings

            settings = load_settings()
        db = settings.HSI_DUCKDB_PATH
    bounds = ingest_bounds(settings)
    resolved = [Path(p).resolve() for p in paths]
    stats = [_check_readable(p) for p in resolved]
    report = IngestReport()
    with _connection(db) as conn, _unordered(conn):
        for path, stat in zip(resolved, stats, strict=True):
            source = str(path)
            if skip_already_ingested and already_ingested(conn, path, stat.st_size, stat.st_mtime_ns):
                report.files.append(FileReport(source, skipped=True))
                continue
            received_at = datetime.now(UTC)
            loader = _Loader(conn, source, received_at, bounds)
            try:
                with open_binary(path) as stream:
                    _ingest_stream(loader, stream, chunk_lines)
            except (OSError, EOFError, zlib.error) as exc:
                raise IngestError(f"cannot read {path}: {exc}") from exc
            _record_file(conn, source, stat, loader.report, received_at)
            report.files.append(loader.report)
    report.elapsed_s = time.perf_counter() - started
    return report


def ingest_lines(
    db: str | os.PathLike[str] | duckdb.DuckDBPyConnection,
    lines: Iterable[str | bytes],
    *,
    source: str = "<memory>",
    settings: Any = None,
    chunk_lines: int = CHUNK_LINES,
) -> IngestReport:
    """Validate and load in-memory lines (numbered from 1) with the same rules; `db` is a path or a connection."""
    started = time.perf_counter()
    bounds = ingest_bounds(settings)

    def run(conn: duckdb.DuckDBPyConnection) -> FileReport:
        loader = _Loader(conn, source, datetime.now(UTC), bounds)
        chunker = Chunker(source, chunk_lines, loader.load_chunk, bounds)
        nos: list[int] = []
        raws: list[bytes] = []
        for line_no, line in enumerate(lines, start=1):
            if isinstance(line, str):
                line = line[:-1] if line.endswith("\n") else line
                try:
                    raw = line.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate
                    loader.reject_now(validate_record(line, source=source, line_no=line_no, bounds=bounds))  # type: ignore[arg-type]
                    continue
            else:
                raw = bytes(line)
                raw = raw[:-1] if raw.endswith(b"\n") else raw
            nos.append(line_no)
            raws.append(raw)
            if len(raws) >= 8192:
                chunker.add(np.array(nos, dtype=np.int64), raws)
                nos, raws = [], []
        if raws:
            chunker.add(np.array(nos, dtype=np.int64), raws)
        chunker.flush()
        loader.flush()
        return loader.report

    with _connection(db) as conn, _unordered(conn):
        file_report = run(conn)
    return IngestReport([file_report], time.perf_counter() - started)


def ingest_bounds(settings: Any) -> Bounds:
    """The bounds of the INGEST_* settings (the defaults without settings)."""
    return DEFAULT_BOUNDS if settings is None else Bounds.from_settings(settings)


@contextmanager
def _connection(db: str | os.PathLike[str] | duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The caller's connection (left open), or a migrated one opened on the path for this call."""
    if isinstance(db, duckdb.DuckDBPyConnection):
        yield db
    else:
        with connect(db) as conn:
            yield conn


def ingest_numbered_lines(
    conn: duckdb.DuckDBPyConnection,
    lines: Iterable[tuple[int, str | bytes]],
    *,
    source: str,
    rejects: Iterable[Rejection] = (),
    bounds: Bounds = DEFAULT_BOUNDS,
) -> FileReport:
    """Validate and load lines that keep their own numbers (an adapter's input lines, e.g. Frigate payloads mapped
    to contract records), with the rules of `ingest_lines`; `rejects` are the adapter's own refusals, quarantined
    in the same transaction."""
    loader = _Loader(conn, source, datetime.now(UTC), bounds)
    for rejection in rejects:
        loader.reject_now(rejection)
    numbered = [(no, line.encode("utf-8") if isinstance(line, str) else bytes(line)) for no, line in lines]
    with _unordered(conn):
        if numbered:
            line_nos = np.array([no for no, _ in numbered], dtype=np.int64)
            loader.load_chunk(check_chunk(line_nos, [raw for _, raw in numbered], source, bounds))
        loader.flush()
    return loader.report
