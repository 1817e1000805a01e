"""Bulk ingestion: good lines load, bad ones are quarantined with a reason naming the field, nothing twice.

Also the guarantee the fast path rests on: a line the fast check (msgspec, then SQL) accepts is one the Python
validator accepts, with the same values (fuzzed with hypothesis).
"""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hsi_dagster.core.intake.detections import ENRICHMENT_SPEC, Detection, Rejection, validate_record
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import IngestError, already_ingested, ingest_files, ingest_lines
from hsi_dagster.storage.ingest_checks import finish_sql
from hsi_dagster.storage.line_reader import check_chunk
from hsi_dagster.synthetic.bad_lines import bad_lines
from hsi_dagster.synthetic.jsonl import encode_record, write_jsonl
from hsi_dagster.synthetic.streams import simulate

START = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)


def good_records(n: int, seed: int = 5) -> list[dict]:
    records = []
    for record in simulate(seed, start=START, duration_s=6 * 3600, events_per_hour=200):
        records.append(record)
        if len(records) == n:
            return records
    raise AssertionError("simulator produced too few records")


def rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    with connect(db, read_only=True) as conn:
        return conn.execute(sql, params or []).fetchall()


@pytest.fixture
def mixed_file(tmp_path: Path) -> tuple[Path, list[dict], dict[int, object]]:
    """~10 % bad lines of every kind (including a 1 MB one) among simulated detections."""
    good = good_records(1800)
    bad = bad_lines(11, 200)
    lines: list[object] = []
    expected_bad: dict[int, object] = {}
    bad_iter = iter(bad)
    for i, record in enumerate(good):
        lines.append(record)
        if i % 9 == 4:
            item = next(bad_iter, None)
            if item is not None:
                lines.append(item.line)
                expected_bad[len(lines)] = item
    path = tmp_path / "mixed.jsonl"
    write_jsonl(path, lines)
    return path, good, expected_bad


def test_good_lines_load_and_each_bad_one_is_quarantined_naming_its_field(tmp_path: Path, mixed_file) -> None:
    path, good, expected_bad = mixed_file
    db = tmp_path / "hsi.duckdb"
    report = ingest_files(db, [path])
    assert report.loaded == len(good) and report.quarantined == len(expected_bad) == 200
    assert report.files[0].rescued == 0  # every simulated record passed the fast path
    stored = {r[0] for r in rows(db, "SELECT detection_id FROM detections")}
    assert stored == {r["detection_id"] for r in good}
    quarantined = {
        line_no: (reason, raw, source)
        for source, line_no, raw, reason in rows(db, "SELECT source, line_no, raw, reason FROM quarantine")
    }
    assert set(quarantined) == set(expected_bad)
    for line_no, item in expected_bad.items():
        reason, raw, source = quarantined[line_no]
        assert reason.split(":", 1)[0] == item.field, (item.kind, reason)
        assert source == str(path.resolve())
        assert len(raw) <= 4200  # bounded, even for the 1 MB line
    sample = good[123]
    (stored_row,) = rows(
        db,
        "SELECT camera_id, label, confidence, track_id, enrichment, line_no FROM detections WHERE detection_id = ?",
        [sample["detection_id"]],
    )
    assert stored_row[:4] == (sample["camera_id"], sample["label"], sample["confidence"], sample.get("track_id"))
    assert (json.loads(stored_row[4]) if stored_row[4] else None) == sample.get("enrichment")


def test_reingesting_the_same_file_changes_nothing(tmp_path: Path, mixed_file) -> None:
    path, good, expected_bad = mixed_file
    db = tmp_path / "hsi.duckdb"
    ingest_files(db, [path])
    snapshot = {
        table: rows(db, f"SELECT * EXCLUDE ({skip}) FROM {table} ORDER BY ALL")
        for table, skip in (
            ("detections", "ingested_at"),
            ("quarantine", "received_at"),
            ("ingested_files", "ingested_at"),
        )
    }
    again = ingest_files(db, [path])
    assert again.loaded == 0 and again.duplicates == len(good) and again.quarantined == len(expected_bad)
    for table, skip in (
        ("detections", "ingested_at"),
        ("quarantine", "received_at"),
        ("ingested_files", "ingested_at"),
    ):
        assert rows(db, f"SELECT * EXCLUDE ({skip}) FROM {table} ORDER BY ALL") == snapshot[table], table


def test_gzip_loads_like_plain_text(tmp_path: Path, mixed_file) -> None:
    path, good, expected_bad = mixed_file
    zipped = tmp_path / "mixed.jsonl.gz"
    with open(path, "rb") as src, gzip.open(zipped, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain = ingest_files(tmp_path / "a.duckdb", [path])
    packed = ingest_files(tmp_path / "b.duckdb", [zipped])
    assert (packed.loaded, packed.quarantined) == (plain.loaded, plain.quarantined)
    query = "SELECT detection_id, ts, bbox, enrichment FROM detections ORDER BY detection_id"
    assert rows(tmp_path / "a.duckdb", query) == rows(tmp_path / "b.duckdb", query)


def test_line_numbers_survive_huge_lines_blank_lines_bom_and_crlf(tmp_path: Path) -> None:
    records = good_records(4)
    path = tmp_path / "odd.jsonl"
    huge = b'{"detection_id": "' + b"x" * 5_000_000 + b'"}'
    path.write_bytes(
        b"\xef\xbb\xbf"
        + encode_record(records[0])
        + b"\r\n"  # line 1, BOM and CRLF
        + b"\n"  # line 2 blank
        + huge
        + b"\n"  # line 3, longer than a read block
        + encode_record(records[1])
        + b"\n"  # line 4
        + b"   \t\n"  # line 5 blank
        + b'{"detection_id": "\xff"}\n'  # line 6 bad UTF-8
        + encode_record(records[2])
        + b"\n"  # line 7
        + encode_record(records[3])  # line 8, no final newline
    )
    report = ingest_files(tmp_path / "hsi.duckdb", [path])
    assert (report.loaded, report.quarantined, report.blank_lines, report.lines) == (4, 2, 2, 8)
    db = tmp_path / "hsi.duckdb"
    assert rows(db, "SELECT line_no FROM detections ORDER BY line_no") == [(1,), (4,), (7,), (8,)]
    quarantine = rows(db, "SELECT line_no, reason, length(raw) FROM quarantine ORDER BY line_no")
    assert [(q[0], q[1].split(" (")[0]) for q in quarantine] == [
        (3, "line: longer than 65536 bytes"),
        (6, "line: not valid UTF-8"),
    ]
    assert quarantine[0][2] < 20_000


def test_duplicates_inside_a_file_keep_the_first_line(tmp_path: Path) -> None:
    record = good_records(1)[0]
    changed = dict(record, label="changed")
    report = ingest_lines(tmp_path / "hsi.duckdb", [json.dumps(record), json.dumps(changed)])
    assert (report.loaded, report.duplicates) == (1, 1)
    assert rows(tmp_path / "hsi.duckdb", "SELECT label, line_no FROM detections") == [(record["label"], 1)]


def test_unreadable_input_raises_naming_the_path_before_loading_anything(tmp_path: Path, mixed_file) -> None:
    path, _, _ = mixed_file
    db = tmp_path / "hsi.duckdb"
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(IngestError, match="nope.jsonl"):
        ingest_files(db, [path, missing])
    with pytest.raises(IngestError, match="not a regular file"):
        ingest_files(db, [tmp_path])
    assert not db.exists() or rows(db, "SELECT count(*) FROM detections") == [(0,)]
    corrupt = tmp_path / "broken.jsonl.gz"
    corrupt.write_bytes(gzip.compress(path.read_bytes())[:5000])
    with pytest.raises(IngestError, match="broken.jsonl.gz"):
        ingest_files(db, [corrupt])


def test_ingested_files_are_recorded_for_the_inbox_watcher(tmp_path: Path) -> None:
    records = good_records(30)
    path = tmp_path / "inbox.jsonl"
    write_jsonl(path, records[:20])
    db = tmp_path / "hsi.duckdb"
    ingest_files(db, [path])
    stat = path.stat()
    with connect(db) as conn:
        assert already_ingested(conn, path, stat.st_size, stat.st_mtime_ns)
        assert not already_ingested(conn, path, stat.st_size + 1, stat.st_mtime_ns)
    skipped = ingest_files(db, [path], skip_already_ingested=True)
    assert skipped.files[0].skipped and skipped.loaded == 0
    write_jsonl(path, records)  # the file grew: it is ingested again, only the new lines load
    grown = ingest_files(db, [path], skip_already_ingested=True)
    assert grown.loaded == 10 and grown.duplicates == 20
    assert rows(db, "SELECT loaded, quarantined FROM ingested_files WHERE path = ?", [str(path.resolve())]) == [(30, 0)]


def test_in_memory_lines_accept_str_and_bytes_and_refuse_undecodable(tmp_path: Path) -> None:
    records = good_records(3)
    report = ingest_lines(
        tmp_path / "hsi.duckdb",
        [
            json.dumps(records[0]),
            encode_record(records[1]) + b"\n",
            b"\xff\xfe",
            '{"a": "\ud800"}',
            json.dumps(records[2]),
        ],
        source="mem",
    )
    assert (report.loaded, report.quarantined) == (3, 2)
    assert rows(tmp_path / "hsi.duckdb", "SELECT line_no, split_part(reason, ' (', 1) FROM quarantine ORDER BY 1") == [
        (3, "line: not valid UTF-8"),
        (4, "line: not valid UTF-8"),
    ]


def test_ingest_lines_works_inside_an_open_connection(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        report = ingest_lines(conn, [json.dumps(r) for r in good_records(5)])
        assert report.loaded == 5
        assert conn.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0] is True


# ---- the fast path never accepts what the validator refuses -------------------------------------------
CORPUS = [json.dumps(r) for r in good_records(60, seed=9)]
ENRICHED = [line for line in CORPUS if '"enrichment"' in line]
SPECIAL = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-0",
    "1E2",
    "0.5e-1",
    '"\\u0041"',
    '"\\ud800"',
    '"a\\u0001"',
    '"\\n"',
    '"' + "w" * 3000 + '"',
    "[]",
    "{}",
    "null",
    "true",
    '"day"',
    '"0.5"',
    "[0.1,0.2,0.3,0.4]",
    "[0.4,0.2,0.3,0.9]",
    '"2026-12-01T02:14:05Z"',
    '"2026-12-01t02:14:05.5+01:00"',
    '"2026-12-01T24:00:00Z"',
    "[{}]",
    '[{"label":"x","score":2}]',
    '"a\\u003ab"',
    '"\\u007f"',
    '"\u007f"',
    '"say \\"hi\\": ok"',
    '"\\ud83d\\ude00"',
    '{"sam": {"n": 1}}',
    "1e15",
]
JSON_VALUES = st.one_of(
    st.sampled_from(SPECIAL),
    st.recursive(
        st.none()
        | st.booleans()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.integers()
        | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=8,
    ).map(json.dumps),
)
KEYS = ["detection_id", "camera_id", "ts", "label", "confidence", "bbox", "track_id", "zone", "enrichment", "extra"]
INNER = [
    *ENRICHMENT_SPEC,
    "caption",
    "score",
    "label",
    "lighting",
    "bbox",
    "regions",
    "identity",
    "distance_m",
    "seen_before",
    "new",
]


@st.composite
def mutated_lines(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(ENRICHED if draw(st.booleans()) else CORPUS))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["replace", "duplicate", "add", "text"]))
        key = draw(st.sampled_from(KEYS + INNER))
        value = draw(JSON_VALUES)
        needle = f'"{key}":'
        if how == "replace" and needle in text:
            start = text.index(needle) + len(needle)
            end = _value_end(text, start)
            text = text[:start] + value + text[end:]
        elif how in ("duplicate", "add"):
            cut = draw(st.sampled_from([i for i, ch in enumerate(text) if ch == "{"]))
            name = key if how == "duplicate" else draw(st.sampled_from([key, "zz"]))
            text = text[: cut + 1] + f'"{name}":{value},' + text[cut + 1 :]
        else:
            text = draw(
                st.sampled_from(
                    [
                        text.replace(",", ", "),
                        text.replace('"}', '",}'),
                        text.replace("]", ",]"),
                        text.replace('Z"', 'z"'),
                        text.replace('"ts":"', '"ts":" '),
                        text + " ",
                        "  " + text,
                        text.replace(":", ": "),
                    ]
                )
            )
    return text


def _value_end(text: str, start: int) -> int:
    """End of the JSON value starting at `start` (good enough for the minified corpus)."""
    depth, i, in_string = 0, start, False
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch == "," and depth == 0:
            return i
        i += 1
    return i


_CONN = duckdb.connect()
_CONN.execute("SET TimeZone = 'UTC'")


def fast_path(lines: list[str]) -> list[dict]:
    """The fast path over these lines (msgspec, then the SQL finish): per line whether it is accepted, with the
    values it would store."""
    raws = [line.encode("utf-8") for line in lines]
    chunk = check_chunk(np.arange(len(raws), dtype=np.int64), raws, "fuzz")
    accepted: dict[int, dict] = {}
    if len(chunk.columns["pos"]):
        conn = _CONN.cursor()
        conn.register("_hsi_columns", chunk.columns)
        cursor = conn.execute(finish_sql("_hsi_columns"))
        names = [d[0] for d in cursor.description]
        accepted = {row["pos"]: row for row in (dict(zip(names, values, strict=True)) for values in cursor.fetchall())}
    return [accepted.get(i, {"ok": False, "line_no": i}) for i in range(len(lines))]


def assert_agrees(sql_row: dict, text: str) -> None:
    if not sql_row["ok"]:
        return
    result = validate_record(text, source="fuzz", line_no=sql_row["line_no"])
    assert isinstance(result, Detection), (text, result)
    assert result.cuts == (), (text, result.cuts)  # the fast path never stores what the validator would cut
    assert (sql_row["detection_id"], sql_row["camera_id"], sql_row["label"], sql_row["track_id"], sql_row["zone"]) == (
        result.detection_id,
        result.camera_id,
        result.label,
        result.track_id,
        result.zone,
    )
    assert sql_row["ts"] == result.ts
    assert sql_row["confidence"] == result.confidence
    assert (tuple(sql_row["bbox"]) if sql_row["bbox"] is not None else None) == result.bbox
    stored = json.loads(sql_row["enrichment"]) if sql_row["enrichment"] is not None else None
    assert stored == result.enrichment  # numerically: the fast path re-prints a known number (0 -> 0.0)


def test_fast_path_accepts_the_simulated_corpus_with_the_validators_values() -> None:
    for row, text in zip(fast_path(CORPUS), CORPUS, strict=True):
        assert row["ok"], text
        assert_agrees(row, text)


def test_fast_path_refuses_every_generated_bad_line() -> None:
    lines = []
    for item in bad_lines(4, 300):
        try:
            lines.append(item.line.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    assert not any(row["ok"] for row in fast_path(lines))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(mutated_lines(), min_size=1, max_size=40))
def test_fast_path_never_accepts_what_the_validator_refuses(lines: list[str]) -> None:
    lines = [line for line in lines if _is_utf8(line)]
    for row, text in zip(fast_path(lines), lines, strict=True):
        assert_agrees(row, text)


def _is_utf8(text: str) -> bool:
    """Only text that can reach DuckDB: lines with lone surrogates are refused before the fast check."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def test_an_escaped_colon_cannot_hide_a_duplicate_key() -> None:
    """The fast check finds repeated keys by counting ':'; an escaped one (\\u003a) would offset a lost copy."""
    record = good_records(1)[0]
    text = json.dumps(dict(record, label="x")).replace('"label": "x"', '"label": "a\\u003a", "label": "y"')
    assert not fast_path([text])[0]["ok"]
    assert isinstance(validate_record(text, source="t", line_no=1), Rejection)


def test_refused_by_the_fast_path_but_valid_lines_still_load(tmp_path: Path) -> None:
    """Unknown nested fields take the slow path, and still load."""
    record = dict(
        good_records(1)[0],
        enrichment={"scene": {"lighting": "day", "tilt": 2}, "clip": [{"label": "a", "score": 0.5, "rank": 1}]},
    )
    record["label"] = "caf\u00e9"
    text = json.dumps(record, ensure_ascii=True)
    (row,) = fast_path([text])
    assert not row["ok"]
    report = ingest_lines(tmp_path / "hsi.duckdb", [text])
    assert report.loaded == 1 and report.files[0].rescued == 1
    assert rows(tmp_path / "hsi.duckdb", "SELECT label FROM detections") == [("caf\u00e9",)]


def test_quarantine_rows_are_keyed_by_source_and_line(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    ingest_lines(db, ["{", "not json"], source="a")
    ingest_lines(db, ["{", "not json"], source="a")
    ingest_lines(db, ["{"], source="b")
    assert rows(db, "SELECT source, line_no FROM quarantine ORDER BY ALL") == [("a", 1), ("a", 2), ("b", 1)]


def test_validate_record_and_ingest_agree_on_rejections(tmp_path: Path) -> None:
    items = bad_lines(8, 120)
    report = ingest_lines(tmp_path / "hsi.duckdb", [item.line for item in items], source="bad")
    assert report.loaded == 0 and report.quarantined == len(items)
    stored = dict(rows(tmp_path / "hsi.duckdb", "SELECT line_no, reason FROM quarantine"))
    for n, item in enumerate(items, start=1):
        expected = validate_record(item.line, source="bad", line_no=n)
        assert isinstance(expected, Rejection) and stored[n] == expected.reason
