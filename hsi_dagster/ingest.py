"""Bulk, idempotent loading of detection files (JSON Lines, optionally gzipped) into DuckDB.

Design (measured with bench/ingest_bench.py; pure-Python validation ran at ~5-10k lines/s here):
- A reader thread cuts the file into lines block by block (never the whole file; a line too long to be a record
  is skipped without being held) and decodes them, while the main thread has DuckDB (which releases the GIL)
  load the previous chunk.
- Chunks of ~256k lines (at least two DuckDB row groups, so both cores work) are copied into a temp table and
  checked there in SQL (from_json/json_keys over the raw lines); the typed good rows are inserted into
  `detections` in one transaction per chunk. The plain insert is tried first (one index probe per row); once
  a file re-sends a known detection_id it switches to `ON CONFLICT DO NOTHING`, so re-ingesting is a no-op.
- The SQL check is deliberately *stricter* than the contract: any line it does not accept goes to
  `core.detections.validate_record`, the authoritative validator, which either loads it after all or
  quarantines it with the reason naming the field. SQL and Python thus never disagree about what is loaded
  (tests/test_ingest.py fuzzes this), and reasons come from one place. Quarantine rows are keyed by
  (source, line_no).

Late detections: a detection is `is_late` when, at the moment it is loaded, its camera already has a recorded
regular (not fast-path) batch closing after the detection's ts: processing had passed its time when it
arrived. It still lands in a new batch by the usual rules (see batch_store).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import queue
import threading
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

import duckdb
import numpy as np

from hsi_dagster.core.detections import (
    BBOX,
    BOOL,
    CAMERA_ID_PATTERN,
    ENRICHMENT_SPEC,
    LIGHTING,
    LIGHTING_VALUES,
    MAX_DETECTION_ID_CHARS,
    MAX_ENRICHMENT_BYTES,
    MAX_LABEL_CHARS,
    MAX_LINE_BYTES,
    MAX_LIST_ITEMS,
    MAX_TAG_CHARS,
    MAX_TEXT_CHARS,
    NONNEG,
    PRINTABLE_CHAR_CLASS,
    TEXT,
    TOP_LEVEL_FIELDS,
    TS_MAX,
    TS_MIN,
    TS_PATTERN,
    UNIT,
    Detection,
    Leaf,
    ListOf,
    Obj,
    Rejection,
    format_ts,
    truncate_raw,
    validate_record,
)
from hsi_dagster.storage.db import connect

CHUNK_LINES = 256_000
CHUNK_BYTES = 160 << 20
READ_BLOCK_BYTES = 4 << 20


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
    rescued: int = 0  # refused by the SQL fast path, accepted by the authoritative validator (diagnostic)
    skipped: bool = False  # already ingested with the same size and mtime


@dataclass
class IngestReport:
    """Totals over the files of one call; `elapsed_s` is wall time."""

    files: list[FileReport] = field(default_factory=list)
    elapsed_s: float = 0.0

    def _sum(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    @property
    def lines(self) -> int:
        return self._sum("lines")

    @property
    def loaded(self) -> int:
        return self._sum("loaded")

    @property
    def duplicates(self) -> int:
        return self._sum("duplicates")

    @property
    def quarantined(self) -> int:
        return self._sum("quarantined")

    @property
    def blank_lines(self) -> int:
        return self._sum("blank_lines")

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
                    f"{f.quarantined} quarantined" + (f", {f.blank_lines} blank" if f.blank_lines else "")
                )
        out.append(
            f"total: {self.loaded} loaded, {self.duplicates} duplicates skipped, {self.quarantined} quarantined "
            f"in {self.elapsed_s:.2f}s"
        )
        return "\n".join(out)


# ------------------------------------------------------------------------------------------------ SQL fast path
# Every condition below must imply the Python rule it mirrors (tests/test_ingest.py checks this on many kinds of
# bad lines and on fuzzed ones). Values are read as JSON text (from_json with JSON leaves) and typed by their
# first character; casts go through VARCHAR, because casting the JSON type itself turns "0.9" or true into
# numbers. Cost matters here: each JSON function is a parse, so the line is parsed a fixed few times and the
# enrichment (only when present) a few more.


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _txt(x: str) -> str:
    return f"({x})::VARCHAR"


def _is_null(x: str) -> str:
    return f"({x} IS NULL OR {_txt(x)} = 'null')"


def _number(x: str) -> str:
    return f"TRY_CAST({_txt(x)} AS DOUBLE)"


def _is_string(x: str) -> str:
    return f"starts_with({_txt(x)}, '\"')"


def _decoded(x: str) -> str:
    """The value of a JSON string text: the text between the quotes when the line has no backslash (so no
    escapes), else decoded by the JSON reader."""
    return (
        f"CASE WHEN NOT {_is_string(x)} THEN NULL WHEN has_escape THEN json_extract_string({x}, '$') "
        f"ELSE ({_txt(x)})[2:-2] END"
    )


def _bbox_ok(x: str) -> str:
    """Four plain numbers (only number characters, so no strings, booleans, null or NaN), ordered, in 0..1.
    The numbers are read with from_json, several times cheaper than a VARCHAR -> DOUBLE[] cast; its leniency
    (true -> 1) cannot matter once the characters are checked."""
    cond = "len(b) = 4 AND b[1] >= 0 AND b[2] >= 0 AND b[3] <= 1 AND b[4] <= 1 AND b[1] < b[3] AND b[2] < b[4]"
    return (
        f"(regexp_full_match({_txt(x)}, '\\[[-+0-9.eE,]*\\]') "
        f"AND coalesce(list_transform([from_json({_txt(x)}, '[\"DOUBLE\"]')], lambda b: {cond})[1], false))"
    )


def _leaf_ok(x: str, kinds: tuple[str, ...]) -> str:
    options = [_is_null(x)]
    for kind in kinds:
        if kind == TEXT:
            # The JSON text is never shorter than the decoded string, nor its bytes fewer than its characters.
            options.append(f"({_is_string(x)} AND strlen({_txt(x)}) <= {MAX_TEXT_CHARS + 2})")
        elif kind == UNIT:
            options.append(f"(NOT {_is_string(x)} AND {_number(x)} BETWEEN 0 AND 1)")
        elif kind == NONNEG:
            options.append(f"(NOT {_is_string(x)} AND {_number(x)} >= 0 AND isfinite({_number(x)}))")
        elif kind == BOOL:
            options.append(f"({_txt(x)} IN ('true', 'false'))")
        elif kind == LIGHTING:
            options.append(f"({_txt(x)} IN ({', '.join(_lit(chr(34) + v + chr(34)) for v in LIGHTING_VALUES)}))")
        elif kind == BBOX:
            options.append(_bbox_ok(x))
        else:  # pragma: no cover - spec and SQL must move together
            raise ValueError(f"no SQL for leaf kind {kind}")
    return f"coalesce({' OR '.join(options)}, false)"


def _present(refs: Sequence[str]) -> str:
    """How many of these struct fields were found (from_json gives NULL for a missing key)."""
    return " + ".join(f"({ref} IS NOT NULL)::INTEGER" for ref in refs) or "0"


def _known_once(keys: str, known: Sequence[str], found: str, *, closed: bool, count: str | None = None) -> str:
    """No known key twice (from_json reads only the first copy; Python refuses the duplicate) and, if `closed`,
    no unknown key and at least one key. The common case is settled by arithmetic: as many keys (`count`, the
    length of `keys`) as known fields found; only the rest (null values, unknown keys, duplicates) pays for
    the list lambdas."""
    n = count or f"len({keys})"
    known_list = "[" + ", ".join(_lit(k) for k in known) + "]"
    distinct_known = f"len(list_filter({known_list}, lambda a: list_contains({keys}, a)))"
    if closed:
        return f"({n} > 0 AND CASE WHEN {n} = {found} THEN true ELSE {n} = {distinct_known} END)"
    known_seen = f"len(list_filter({keys}, lambda k: list_contains({known_list}, k)))"
    return f"CASE WHEN {n} = {found} THEN true ELSE {known_seen} = {distinct_known} END"


def _printable(x: str, limit: int) -> str:
    """1..limit characters; control characters can only come from escapes, so lines without a backslash skip
    the regex."""
    return f"(length({x}) BETWEEN 1 AND {limit} AND (NOT has_escape OR regexp_full_match({x}, {_lit(PRINTABLE_CHAR_CLASS + '*')})))"


def _structure(spec: Any) -> str:
    if isinstance(spec, Leaf):
        return '"JSON"'
    if isinstance(spec, ListOf):
        return f"[{_structure(spec.item)}]"
    return "{" + ", ".join(f'"{name}": {_structure(sub)}' for name, sub in spec.fields.items()) + "}"


@dataclass
class _EnrichmentSql:
    columns: list[str]  # computed once per enriched row from `e`
    conditions: list[str]


def _enrichment_sql(e: str) -> _EnrichmentSql:
    """`e` is the enrichment's JSON text. One struct parse gives every known leaf; json_keys gives the key lists
    that expose duplicates, unknown fields and non-objects. Unknown keys at the top are kept (like Python);
    unknown fields inside known objects, empty or null known objects go to Python (rare, and Python has the
    final word)."""
    objects: list[tuple[str, str, Obj]] = []  # (json path, struct reference, spec)
    lists: list[tuple[str, str, ListOf]] = []
    leaves: list[tuple[str, Leaf]] = []

    def walk(path: str, ref: str, spec: Any) -> None:
        if isinstance(spec, Obj):
            objects.append((path, ref, spec))
            for name, sub in spec.fields.items():
                walk(f"{path}.{name}", f"{ref}.{name}", sub)
        elif isinstance(spec, ListOf):
            lists.append((path, ref, spec))
        else:
            leaves.append((ref, spec))

    for key, spec in ENRICHMENT_SPEC.items():
        walk(f"$.{key}", f"en.{key}", spec)
    structure = "{" + ", ".join(f'"{k}": {_structure(s)}' for k, s in ENRICHMENT_SPEC.items()) + "}"
    key_paths = ["$"] + [p for p, _, _ in objects] + [p for p, _, _ in lists]
    slot = {path: i for i, path in enumerate(key_paths, start=1)}  # NULL at a slot when the path is missing
    columns = [
        f"from_json({e}, {_lit(structure)}) AS en",
        f"json_keys({e}, [{', '.join(_lit(p) for p in key_paths)}]) AS en_keys",
        "list_transform(en_keys, lambda l: len(l)) AS en_lens",
    ]
    top_found = _present([f"en_lens[{slot[f'$.{k}']}]" for k in ENRICHMENT_SPEC])
    conds = [
        f"starts_with({e}, '{{')",
        f"strlen({e}) <= {MAX_ENRICHMENT_BYTES // 2}",
        _known_once("en_keys[1]", list(ENRICHMENT_SPEC), top_found, closed=False, count="en_lens[1]"),
    ]
    for path, ref, spec in objects:
        i = slot[path]
        found = _present([f"{ref}.{name}" for name in spec.fields])
        conds.append(f"(en_lens[{i}] IS NULL OR {_known_once(f'en_keys[{i}]', list(spec.fields), found, closed=True, count=f'en_lens[{i}]')})")
    groups: dict[tuple[str, ...], list[str]] = {}
    for ref, leaf in leaves:  # one lambda over a list per kind of leaf: far cheaper than one condition per leaf
        groups.setdefault(leaf.kinds, []).append(ref)
    for kinds, refs in groups.items():
        values = "[" + ", ".join(_txt(ref) for ref in refs) + "]"
        conds.append(f"list_bool_and(list_transform({values}, lambda x: {_leaf_ok('x', kinds)}))")
    for k, (path, ref, spec) in enumerate(lists):
        item = spec.item
        if not isinstance(item, Obj) or not all(isinstance(s, Leaf) for s in item.fields.values()):  # pragma: no cover
            raise ValueError(f"SQL fast path supports lists of flat objects only ({path})")
        columns.append(f"json_keys({e}, {_lit(path + '[*]')}) AS en_items{k}")
        # Zip keys and values per item: a lambda that referred to an outer column would copy it per element.
        found = _present([f"p[2].{name}" for name in item.fields])
        item_checks = [_known_once("p[1]", list(item.fields), found, closed=True)]
        item_checks += [_leaf_ok(f"p[2].{name}", leaf.kinds) for name, leaf in item.fields.items()]  # type: ignore[union-attr]
        conds.append(
            f"(en_lens[{slot[path]}] IS NULL OR ({ref} IS NOT NULL AND len({ref}) = len(en_items{k}) AND len({ref}) <= {MAX_LIST_ITEMS} "
            f"AND coalesce(list_bool_and(list_transform(list_zip(en_items{k}, {ref}), lambda p: {' AND '.join(item_checks)})), true)))"
        )
    return _EnrichmentSql(columns, conds)


def _top_checks() -> list[str]:
    """Conditions on the columns of the `typed` stage (all must hold)."""
    return [
        "j IS NOT NULL",
        _known_once("top_keys", TOP_LEVEL_FIELDS, _present([f"j.{name}" for name in TOP_LEVEL_FIELDS]), closed=False, count="top_count"),
        f"{_is_string('j.detection_id')} AND {_printable('v_detection_id', MAX_DETECTION_ID_CHARS)}",
        f"{_is_string('j.camera_id')} AND regexp_full_match(v_camera_id, {_lit(CAMERA_ID_PATTERN)})",
        f"{_is_string('j.ts')} AND regexp_full_match(v_ts, {_lit(TS_PATTERN)})",
        f"ts >= TIMESTAMPTZ '{TS_MIN.isoformat()}' AND ts < TIMESTAMPTZ '{TS_MAX.isoformat()}'",
        f"{_is_string('j.label')} AND {_printable('v_label', MAX_LABEL_CHARS)}",
        f"NOT {_is_string('j.confidence')} AND confidence BETWEEN 0 AND 1",
        f"({_is_null('j.bbox')} OR {_bbox_ok('j.bbox')})",
        f"({_is_null('j.track_id')} OR ({_is_string('j.track_id')} AND {_printable('v_track_id', MAX_TAG_CHARS)}))",
        f"({_is_null('j.zone')} OR ({_is_string('j.zone')} AND {_printable('v_zone', MAX_TAG_CHARS)}))",
    ]


def build_check_sql(relation: str) -> str:
    """SELECT over `relation(line_no, line)` giving ok/blank flags, the typed columns of ok rows and the text of
    the lines that need the Python validator. Exposed for tests of the SQL/Python agreement."""
    as_json = "{" + ", ".join(f'"{name}": "JSON"' for name in TOP_LEVEL_FIELDS) + "}"
    enrichment = _enrichment_sql("e")
    checks = _top_checks()
    top_ok = " AND ".join(f"coalesce({c}, false)" for c in checks)
    enrichment_ok = " AND ".join(f"coalesce({c}, false)" for c in enrichment.conditions)
    en_columns = "".join(f",\n        {col}" for col in enrichment.columns)
    return f"""
WITH raw AS (
    SELECT line_no, line,
        CASE WHEN starts_with(line, '{{') THEN false ELSE regexp_full_match(line, '[ \t\r\n]*') END AS blank
    FROM {relation}
), parsed AS (
    SELECT line_no, line, blank, contains(line, '\\') AS has_escape,
        CASE WHEN NOT blank AND strlen(line) <= {MAX_LINE_BYTES}
                  AND NOT regexp_matches(line, ',[ \\t\\r\\n]*[\\]}}]') AND json_valid(line) AND starts_with(ltrim(line), '{{')
             THEN line END AS object_line
    FROM raw
), json_parsed AS (
    -- No CASE around nested values: CASE copies structs and lists; the JSON functions return NULL for NULL.
    SELECT *, from_json(object_line, {_lit(as_json)}) AS j, json_keys(object_line) AS top_keys, len(top_keys) AS top_count
    FROM parsed
), values AS (
    SELECT *,
        {_decoded('j.detection_id')} AS v_detection_id,
        {_decoded('j.camera_id')} AS v_camera_id,
        {_decoded('j.ts')} AS v_ts,
        {_decoded('j.label')} AS v_label,
        {_decoded('j.track_id')} AS v_track_id,
        {_decoded('j.zone')} AS v_zone,
        {_number('j.confidence')} AS confidence,
        CASE WHEN NOT {_is_null('j.enrichment')} THEN {_txt('j.enrichment')} END AS e
    FROM json_parsed
), typed AS (
    SELECT *, TRY_CAST(upper(v_ts) AS TIMESTAMPTZ) AS ts FROM values
), top_checked AS (
    SELECT *, {top_ok} AS top_ok FROM typed
), enriched AS (
    SELECT *{en_columns} FROM top_checked
), checked AS (
    SELECT *, top_ok AND (e IS NULL OR CASE WHEN e IS NULL THEN true ELSE {enrichment_ok} END) AS ok FROM enriched
)
SELECT line_no, blank, ok,
    -- The values of refused rows are never read (the insert takes ok rows only), so no CASE on them.
    CASE WHEN NOT ok AND NOT blank THEN line END AS line,
    v_detection_id AS detection_id, v_camera_id AS camera_id, ts, v_label AS label, confidence,
    from_json(CASE WHEN NOT {_is_null('j.bbox')} THEN {_txt('j.bbox')} END, '["DOUBLE"]') AS bbox,
    v_track_id AS track_id, v_zone AS zone,
    CASE WHEN e IS NOT NULL THEN j.enrichment END AS enrichment
FROM checked
"""


_CHECK_SQL = build_check_sql("_hsi_chunk")

_INSERT_SQL = """
INSERT INTO detections (detection_id, camera_id, ts, label, confidence, bbox, track_id, zone, enrichment,
                        source, line_no, ingested_at, batch_id, is_late)
SELECT r.detection_id, r.camera_id, r.ts, r.label, r.confidence, r.bbox, r.track_id, r.zone, r.enrichment,
       $source, r.line_no, $received_at, NULL, coalesce(r.ts < p.processed_until, false)
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
       CAST(bbox AS DOUBLE[]) AS bbox, track_id, zone, CAST(enrichment AS JSON) AS enrichment FROM _hsi_py_rows
"""


# ------------------------------------------------------------------------------------------------ loading
class _Loader:
    """Loads chunks of one source inside the given connection, one transaction per chunk."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, source: str, received_at: datetime) -> None:
        self.conn = conn
        self.report = FileReport(source)
        self.params = {"source": source, "received_at": received_at}
        self._pending_rejects: list[Rejection] = []
        self.on_conflict = False  # switched on at the first chunk that re-sends known detection_ids

    def reject_now(self, rejection: Rejection) -> None:
        """A line refused before SQL (undecodable, over-long); written with the next chunk."""
        self._pending_rejects.append(rejection)
        self.report.lines += 1

    def load_chunk(self, line_nos: np.ndarray, lines: np.ndarray) -> None:
        """Check a chunk in SQL (into a temp table: no WAL), then insert it in one transaction."""
        conn = self.conn
        self.report.lines += len(lines)
        # Copy the Python strings into DuckDB first (the only step that needs the GIL), so the checks run on both
        # cores while the reader thread prepares the next chunk.
        conn.register("_hsi_lines", {"line_no": line_nos, "line": lines})
        try:
            conn.execute("CREATE OR REPLACE TEMP TABLE _hsi_chunk AS SELECT * FROM _hsi_lines")
        finally:
            conn.unregister("_hsi_lines")
        try:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE _hsi_checked AS {_CHECK_SQL}")
        finally:
            conn.execute("DROP TABLE IF EXISTS _hsi_chunk")
        try:
            valid, blank, distinct = conn.execute(
                "SELECT count(*) FILTER (WHERE ok), count(*) FILTER (WHERE blank), "
                "count(DISTINCT detection_id) FILTER (WHERE ok) FROM _hsi_checked"
            ).fetchone()  # type: ignore[misc]
            refused = conn.execute(
                "SELECT line_no, line FROM _hsi_checked WHERE NOT ok AND NOT blank ORDER BY line_no"
            ).fetchall()
            rows = "SELECT * FROM _hsi_checked WHERE ok"
            inserted = self._transaction(lambda: self._insert(rows, dedupe=distinct < valid), refused)
        finally:
            conn.execute("DROP TABLE IF EXISTS _hsi_checked")
        self.report.blank_lines += blank
        self.report.loaded += inserted
        self.report.duplicates += valid - inserted

    def flush_rejects(self) -> None:
        if self._pending_rejects:
            self._transaction(lambda: 0, [])

    def _transaction(self, insert: Any, refused: list[tuple[int, str]]) -> int:
        """Insert the checked rows and settle the refused lines in one transaction. The plain insert is tried
        first (one index probe per row); if a detection_id is already stored it fails, and the chunk is redone
        with ON CONFLICT DO NOTHING, which the rest of the file then keeps using."""
        conn = self.conn
        before = dataclasses.replace(self.report)
        for attempt in range(2):
            self.report = dataclasses.replace(before)
            conn.execute("BEGIN TRANSACTION")
            try:
                inserted = insert()
                self._settle(refused)
                conn.execute("COMMIT")
                self._pending_rejects = []
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

    def _insert(self, rows_sql: str, *, dedupe: bool) -> int:
        sql = _INSERT_SQL.format(rows=rows_sql, dedupe=_DEDUPE if dedupe else "", conflict=_ON_CONFLICT if self.on_conflict else "")
        row = self.conn.execute(sql, self.params).fetchone()
        return int(row[0]) if row else 0

    def _settle(self, refused: list[tuple[int, str]]) -> None:
        """The authoritative validator decides on every line SQL did not accept."""
        rescued: list[tuple[int, Detection]] = []
        rejects = list(self._pending_rejects)
        for line_no, line in refused:
            result = validate_record(line, source=self.report.source, line_no=line_no)
            if isinstance(result, Detection):
                rescued.append((line_no, result))
            else:
                rejects.append(result)
        if rescued:
            self._insert_detections(rescued)
        if rejects:
            self._quarantine(rejects)

    def _insert_detections(self, rows: list[tuple[int, Detection]]) -> None:
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
        }
        self.conn.register("_hsi_py_rows", data)
        try:
            inserted = self._insert(_PY_ROWS, dedupe=len({d.detection_id for _, d in rows}) < len(rows))
        finally:
            self.conn.unregister("_hsi_py_rows")
        self.report.loaded += inserted
        self.report.duplicates += len(rows) - inserted
        self.report.rescued += len(rows)

    def _quarantine(self, rejects: list[Rejection]) -> None:
        data = {
            "line_no": np.array([r.line_no for r in rejects], dtype=np.int64),
            "raw": np.array([r.raw for r in rejects], dtype=object),
            "reason": np.array([r.reason for r in rejects], dtype=object),
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
            self.conn.unregister("_hsi_rejects")
        self.report.quarantined += len(rejects)


class _Chunker:
    """Gathers decoded lines into chunks of about `chunk_lines`; hands them, and the lines refused while
    decoding, to the given callbacks."""

    def __init__(self, source: str, chunk_lines: int, on_chunk: Any, on_reject: Any) -> None:
        self.source = source
        self.chunk_lines = chunk_lines
        self.on_chunk = on_chunk
        self.on_reject = on_reject
        self.nos: list[np.ndarray] = []
        self.texts: list[list[str]] = []
        self.count = 0
        self.size = 0

    def add(self, nos: np.ndarray, lines: list[str]) -> None:
        self.nos.append(nos)
        self.texts.append(lines)
        self.count += len(lines)
        self.size += sum(map(len, lines))
        if self.count >= self.chunk_lines or self.size >= CHUNK_BYTES:
            self.flush()

    def add_raw(self, first_no: int, raw_lines: list[bytes]) -> None:
        """Lines of a block numbered from `first_no`, decoded in as few pieces as possible: a line with invalid
        UTF-8 is cut out and refused with the reason, the rest of the block still decodes at once."""
        block = b"\n".join(raw_lines)
        start, line_no = 0, first_no
        while start <= len(block):
            try:
                lines = block[start:].decode("utf-8").split("\n")
            except UnicodeDecodeError as exc:
                bad = start + exc.start
                line_start = block.rfind(b"\n", start, bad) + 1 or start
                line_end = block.find(b"\n", bad)
                line_end = len(block) if line_end < 0 else line_end
                if line_start > start:  # the whole lines before the bad one decode (the error is past them)
                    lines = block[start : line_start - 1].decode("utf-8").split("\n")
                    self.add(np.arange(line_no, line_no + len(lines), dtype=np.int64), lines)
                    line_no += len(lines)
                self.on_reject(validate_record(block[line_start:line_end], source=self.source, line_no=line_no))
                line_no += 1
                start = line_end + 1
                continue
            self.add(np.arange(line_no, line_no + len(lines), dtype=np.int64), lines)
            break

    def flush(self) -> None:
        if self.count:
            lines = np.empty(self.count, dtype=object)
            position = 0
            for part in self.texts:
                lines[position : position + len(part)] = part
                position += len(part)
            self.on_chunk(np.concatenate(self.nos), lines)
        self.nos, self.texts, self.count, self.size = [], [], 0, 0


@contextmanager
def _open_binary(path: Path) -> Iterator[BinaryIO]:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its name)."""
    with open(path, "rb") as raw:
        if raw.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield raw  # type: ignore[misc]


@dataclass
class _LongLine:
    line_no: int
    head: bytes
    size: int


def _read_blocks(stream: BinaryIO, block_bytes: int) -> Iterator[tuple[int, list[bytes]] | _LongLine]:
    """Yield (first line number, complete lines) per block, or a _LongLine for a line so long that only its head
    is kept: the rest is skipped without being held in memory. Memory stays around one block."""
    line_no = 1
    carry = b""
    long_line: _LongLine | None = None
    while True:
        block = stream.read(block_bytes)
        if not block:
            break
        if long_line is not None:
            cut = block.find(b"\n")
            if cut < 0:
                long_line.size += len(block)
                continue
            long_line.size += cut
            yield long_line
            long_line = None
            line_no += 1
            block = block[cut + 1 :]
        data = carry + block if carry else block
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
        else:
            lines = data[:last].split(b"\n")
            carry = data[last + 1 :]
            yield line_no, lines
            line_no += len(lines)
        if len(carry) > MAX_LINE_BYTES + 1:
            long_line, carry = _LongLine(line_no, carry[: 4 * 4096], len(carry)), b""
    if long_line is not None:
        yield long_line
    elif carry:
        yield line_no, [carry]


class _Stopped(Exception):
    """The consumer gave up (an error while loading): the reader thread ends quietly."""


def _ingest_stream(loader: _Loader, stream: BinaryIO, chunk_lines: int) -> None:
    """A reader thread cuts and decodes the next chunk while DuckDB (which releases the GIL) loads this one."""
    items: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: tuple[Any, ...]) -> None:
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def produce() -> None:
        try:
            chunker = _Chunker(
                loader.report.source, chunk_lines, lambda nos, lines: put(("chunk", nos, lines)), lambda r: put(("reject", r))
            )
            first_block = True
            for item in _read_blocks(stream, READ_BLOCK_BYTES):
                if isinstance(item, _LongLine):
                    reason = f"line: longer than {MAX_LINE_BYTES} bytes ({item.size})"
                    put(("reject", Rejection(loader.report.source, item.line_no, truncate_raw(item.head), reason)))
                    continue
                line_no, lines = item
                if first_block and lines[0].startswith(b"\xef\xbb\xbf"):
                    lines[0] = lines[0][3:]  # a UTF-8 byte order mark from Windows tools
                first_block = False
                chunker.add_raw(line_no, lines)
            chunker.flush()
            put(("end",))
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the consumer, which raises it
            try:
                put(("error", exc))
            except _Stopped:
                pass

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
        loader.flush_rejects()
    finally:
        stop.set()
        reader.join()


@contextmanager
def _unordered(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Let DuckDB build the temp tables in parallel (row order is not needed: every row carries its line_no)."""
    previous = conn.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0]  # type: ignore[index]
    conn.execute("SET preserve_insertion_order = false")
    try:
        yield
    finally:
        conn.execute(f"SET preserve_insertion_order = {'true' if previous else 'false'}")


def _record_file(conn: duckdb.DuckDBPyConnection, source: str, stat: os.stat_result, report: FileReport, at: datetime) -> None:
    conn.execute(
        """INSERT INTO ingested_files (path, size, mtime_ns, loaded, quarantined, ingested_at)
           VALUES ($path, $size, $mtime, $loaded, $quarantined, $at)
           ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns,
               loaded = ingested_files.loaded + excluded.loaded, quarantined = excluded.quarantined,
               ingested_at = excluded.ingested_at""",
        {"path": source, "size": stat.st_size, "mtime": stat.st_mtime_ns, "loaded": report.loaded,
         "quarantined": report.quarantined, "at": at},
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
    db_path: str | os.PathLike[str] | None,
    paths: Iterable[str | os.PathLike[str]],
    *,
    settings: Any = None,
    skip_already_ingested: bool = False,
    chunk_lines: int = CHUNK_LINES,
) -> IngestReport:
    """Validate and load JSONL (or .jsonl.gz) files; bad records are quarantined, never fatal.

    `db_path` None means `settings.HSI_DUCKDB_PATH`. All paths are checked first, so a missing or unreadable
    one raises IngestError before anything is loaded; a file that turns out corrupt midway (bad gzip) raises
    IngestError naming it, with its earlier chunks kept (re-ingesting is idempotent). Each file is recorded in
    `ingested_files`; with `skip_already_ingested` an unchanged file (same size and mtime) is skipped.
    """
    started = time.perf_counter()
    if db_path is None:
        if settings is None:
            from hsi_dagster.settings import load_settings

            settings = load_settings()
        db_path = settings.HSI_DUCKDB_PATH
    resolved = [Path(p).resolve() for p in paths]
    stats = [_check_readable(p) for p in resolved]
    report = IngestReport()
    with connect(db_path) as conn, _unordered(conn):
        for path, stat in zip(resolved, stats):
            source = str(path)
            if skip_already_ingested and already_ingested(conn, path, stat.st_size, stat.st_mtime_ns):
                report.files.append(FileReport(source, skipped=True))
                continue
            received_at = datetime.now(timezone.utc)
            loader = _Loader(conn, source, received_at)
            try:
                with _open_binary(path) as stream:
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
    del settings  # accepted for symmetry with ingest_files
    started = time.perf_counter()

    def run(conn: duckdb.DuckDBPyConnection) -> FileReport:
        loader = _Loader(conn, source, datetime.now(timezone.utc))
        chunker = _Chunker(source, chunk_lines, loader.load_chunk, loader.reject_now)
        nos: list[int] = []
        texts: list[str] = []
        for line_no, line in enumerate(lines, start=1):
            if isinstance(line, str):
                text = line[:-1] if line.endswith("\n") else line
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    loader.reject_now(validate_record(text, source=source, line_no=line_no))  # type: ignore[arg-type]
                    continue
            else:
                raw = bytes(line)
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    loader.reject_now(validate_record(raw, source=source, line_no=line_no))  # type: ignore[arg-type]
                    continue
            nos.append(line_no)
            texts.append(text)
            if len(texts) >= 8192:
                chunker.add(np.array(nos, dtype=np.int64), texts)
                nos, texts = [], []
        if texts:
            chunker.add(np.array(nos, dtype=np.int64), texts)
        chunker.flush()
        loader.flush_rejects()
        return loader.report

    if isinstance(db, duckdb.DuckDBPyConnection):
        with _unordered(db):
            file_report = run(db)
    else:
        with connect(db) as conn, _unordered(conn):
            file_report = run(conn)
    return IngestReport([file_report], time.perf_counter() - started)
