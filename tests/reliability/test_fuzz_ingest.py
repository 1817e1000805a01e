"""#15 item 6: fuzzed input against the real ingest (`ingest_files`, what `hsi ingest` runs) into a real DuckDB file.

Two generators of random and mutated lines, both derived from valid contract records:
- hypothesis (`mutated_line`) for a property test over small files: it shrinks a failing case to a minimal one;
- a seeded bulk generator (`bulk_lines`) for the 100k-line volume, fast enough for CI.
Mutations: dropped and renamed fields, wrong types, huge numbers, NaN/Infinity, odd unicode, invalid UTF-8, truncated
JSON, duplicate keys, nested garbage, over-long lines (also one longer than the reader's block), blank lines.

For every line the verdict stored in DuckDB must be the Python validator's (`core.intake.detections.validate_record`,
the authoritative one): loaded with its values (whichever path loaded it: the msgspec + SQL fast path or the
validator), or quarantined with the validator's reason (never empty, naming a field), or counted blank. Nothing is
lost: lines in = loaded + duplicates + quarantined + blank.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hsi_dagster.core.intake.detections import ENRICHMENT_SPEC, MAX_LINE_BYTES, Detection, Rejection, validate_record
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import IngestReport, ingest_files, storable_text
from hsi_dagster.storage.line_reader import GZIP_HEADER
from hsi_dagster.synthetic.streams import simulate

START = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
BULK_LINES = 100_000
BULK_SECONDS = 60.0  # the whole bulk test (generate, ingest, check every line), on 2 shared cores


def _base_records(n: int = 600) -> list[dict[str, Any]]:
    """Valid simulated records, every other one with a full enrichment (all the known keys)."""
    records = []
    for record in simulate(15, start=START, duration_s=8 * 3600, events_per_hour=120, enrichment_rate=0.6):
        records.append(record)
        if len(records) == n:
            return records
    raise AssertionError("the simulator produced too few records")


BASE = _base_records()
FIELDS = ["detection_id", "camera_id", "ts", "label", "confidence", "bbox", "track_id", "zone", "enrichment"]
ENRICHMENT_KEYS = list(ENRICHMENT_SPEC)

# Values that break (or exercise) a rule of contract section 1, as JSON text.
WEIRD_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e308",
    "1e309",
    "-1e400",
    "1" + "0" * 400,
    "123456789012345678901234567890",
    "-0",
    "-0.0",
    "0.9999999999999999999",
    "1.0000000001",
    "1E-320",
    "true",
    "false",
    "null",
    "[]",
    "{}",
    '""',
    '" "',
    '"0.5"',
    "[0.1,0.2,0.3,0.4]",
    "[0.4,0.3,0.2,0.1]",
    "[0.1,0.2,0.3]",
    '[0.1,0.2,0.3,"0.4"]',
    '"2026-12-01T02:14:05Z"',
    '"2026-12-01T02:14:05"',
    '"2026-02-30T02:14:05Z"',
    '"2026-12-01T23:59:60Z"',
    '"2026-12-01T02:14:05+24:00"',
    '"0001-01-01T00:00:00Z"',
    '"9999-12-31T23:59:59.999999999Z"',
    '"1970-01-01T00:00:00+00:01"',
    '"2199-12-31T23:59:59-00:01"',
    '"\\u0000"',
    '"a\\u0001b"',
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\ud83d\\ude00"',
    '"\\u202eevil\\u202c"',
    '"\\u200b"',
    '"caf\\u00e9"',
    '"\u00e9\u0301\u0302\u0303"',
    '"\U0001f600\U0001f4a9"',
    '"\u05e9\u05dc\u05d5\u05dd"',
    '"\\n"',
    '"a\\"b"',
    '"x\\u003ay"',
    '"\\\\"',
    '"' + "w" * 3000 + '"',
    '"' + "c" * 129 + '"',
    '{"label":"a","score":0.5}',
    '[{"label":"a","score":2}]',
    '[{"label":"a","score":0.5,"extra":[1,{"x":NaN}]}]',
    '{"caption":1}',
    '{"regions":[{"bbox":[0.9,0.1,0.2,0.5]}]}',
    '{"lighting":"noon"}',
    "[" * 50 + "]" * 50,
    '{"a":' * 40 + "1" + "}" * 40,
    "[" + ",".join(['{"label":"x","score":0.1}'] * 70) + "]",
]
INVALID_UTF8 = [
    b"\xff",
    b"\xfe\xff",
    b"\xc3\x28",
    b"\xe2\x82",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x80",
]
RAW_BYTES = [b"\x00", b"\x01", b"\x1f", b"\x7f", b"\r", b"\t", b"\x0b", b"\x0c", b"\xc2\x85", b"\xe2\x80\xa8"]


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _value_span(text: bytes, start: int) -> int:
    """End (exclusive) of the JSON value starting at `start` in compact JSON."""
    depth, i, in_string = 0, start, False
    while i < len(text):
        ch = text[i : i + 1]
        if in_string:
            if ch == b"\\":
                i += 1
            elif ch == b'"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif ch == b'"':
            in_string = True
        elif ch in (b"[", b"{"):
            depth += 1
        elif ch in (b"]", b"}"):
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch == b"," and depth == 0:
            return i
        i += 1
    return i


class Mutator:
    """Mutations of a valid record's line; `choose(options)` picks one (a seeded Random or a hypothesis draw)."""

    def __init__(self, choose: Any, integer: Any) -> None:
        self.choose = choose
        self.integer = integer

    def record(self, detection_id: str) -> dict[str, Any]:
        return dict(self.choose(BASE), detection_id=detection_id)

    def long_line(self, detection_id: str) -> bytes:
        text = _dump(self.record(detection_id))
        size = self.choose([MAX_LINE_BYTES - 1, MAX_LINE_BYTES, MAX_LINE_BYTES + 1, MAX_LINE_BYTES * 2])
        return text[:-1] + b',"pad":"' + b"p" * max(size - len(text) - 9, 1) + b'"}'

    def line(self, detection_id: str) -> bytes:
        record = self.record(detection_id)
        kind = self.choose(KINDS)
        if kind == "valid":
            return _dump(record)
        if kind == "unknown_field":
            record[self.choose(["extra", "Label", "x" * 40, "enrichment_v2"])] = json.loads(self.choose(SAFE_JSON))
            return _dump(record)
        if kind == "drop":
            record.pop(self.choose(FIELDS), None)
            return _dump(record)
        if kind == "rename":
            name = self.choose([f for f in FIELDS if f in record])
            record[self.choose([name.upper(), name + " ", name[:-1], "_" + name])] = record.pop(name)
            return _dump(record)
        if kind == "enrichment":
            enrichment = dict(record.get("enrichment") or {})
            key = self.choose(ENRICHMENT_KEYS + ["new_model"])
            text = _dump(dict(record, enrichment=dict(enrichment, **{key: "@@"}))).decode()
            return text.replace('"@@"', self.choose(WEIRD_VALUES)).encode()
        text = _dump(record)
        if kind == "replace":
            needle = b'"' + self.choose(FIELDS + ["caption", "score", "label", "lighting", "regions"]).encode() + b'":'
            at = text.find(needle)
            if at < 0:
                return text
            start = at + len(needle)
            return text[:start] + self.choose(WEIRD_VALUES).encode() + text[_value_span(text, start) :]
        if kind == "duplicate_key":
            name = self.choose(FIELDS + ["extra"])
            return text[:-1] + b',"' + name.encode() + b'":' + self.choose(WEIRD_VALUES).encode() + b"}"
        if kind == "truncate":
            return text[: self.integer(0, len(text) - 1)]
        if kind == "bytes":
            at = self.integer(0, len(text))
            return text[:at] + self.choose(INVALID_UTF8 + RAW_BYTES) + text[at:]
        if kind == "flip":
            at = self.integer(0, len(text) - 1)
            return text[:at] + bytes([self.integer(0, 255)]) + text[at + 1 :]
        if kind == "garbage":
            return bytes(self.integer(0, 255) for _ in range(self.integer(1, 80)))
        if kind == "nested":
            depth = self.choose([10, 200, 1000, 5000])
            inner = b"[" * depth + b"]" * depth
            return text[:-1] + b',"enrichment":{"deep":' + inner + b"}}"
        if kind == "wrap":
            return self.choose([b"[" + text + b"]", b'"' + text.replace(b'"', b'\\"') + b'"', text + text, b"null"])
        if kind == "blank":
            return self.choose([b"", b" ", b"\t", b"\r", b" \t \r"])
        if kind == "whitespace":
            return self.choose([b"  " + text, text + b" \r", text.replace(b",", b" , "), text.replace(b":", b": ")])
        raise AssertionError(kind)


KINDS = [
    "valid",
    "valid",
    "valid",
    "unknown_field",
    "drop",
    "rename",
    "enrichment",
    "enrichment",
    "replace",
    "replace",
    "replace",
    "duplicate_key",
    "truncate",
    "bytes",
    "flip",
    "garbage",
    "nested",
    "wrap",
    "blank",
    "whitespace",
]
SAFE_JSON = ["1", '"x"', "null", "[1,2]", '{"a":{"b":[true]}}', "1e308"]


def bulk_lines(seed: int, n: int) -> Iterator[bytes]:
    """`n` lines (without newline) from a seeded Random; line 1 is a valid record (no BOM question)."""
    rng = random.Random(f"hsi-fuzz-ingest|{seed}")
    mutator = Mutator(rng.choice, rng.randint)
    yield _dump(mutator.record(f"fz-{seed}-0"))
    for n_line in range(1, n):
        if n_line % 997 == 0:  # over-long lines: a few, they are expensive (near, at and far over the bound)
            yield mutator.long_line(f"fz-{seed}-{n_line}")
        else:
            yield mutator.line(f"fz-{seed}-{n_line}").replace(b"\n", b" ")


@st.composite
def mutated_line(draw: st.DrawFn) -> bytes:
    """One line from hypothesis choices (so a failure shrinks to the mutation that causes it)."""
    ident = draw(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8))
    mutator = Mutator(lambda options: draw(st.sampled_from(options)), lambda lo, hi: draw(st.integers(lo, hi)))
    roll = draw(st.integers(0, 19))
    if roll == 0:
        line = draw(st.binary(max_size=120))
    elif roll == 1:
        line = mutator.long_line("hyp-" + ident)
    else:
        line = mutator.line("hyp-" + ident)
    return line.replace(b"\n", b" ")


# ------------------------------------------------------------------------------------------------- the oracle
@dataclass
class Expected:
    """The validator's verdict on one line: `detection` (loaded or a duplicate), `reason` (quarantined), or blank."""

    detection: Detection | None = None
    reason: str | None = None
    blank: bool = False


def expected_verdicts(lines: list[bytes]) -> list[Expected]:
    out = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip(b" \t\r\n"):
            out.append(Expected(blank=True))
            continue
        result = validate_record(line, source="fuzz", line_no=line_no)
        out.append(
            Expected(detection=result)
            if isinstance(result, Detection)
            else Expected(reason=storable_text(result.reason))
        )
        assert isinstance(result, (Detection, Rejection))
    return out


def _same(a: Any, b: Any) -> bool:
    """JSON values equal numerically (the fast path re-prints 0 as 0.0), NaN equal to NaN (unknown content).
    Iterative: unknown enrichment content can be nested deeper than this test's stack allows."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif isinstance(x, bool) or isinstance(y, bool):
            if x is not y:
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if not (x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def check_stored(db: Path, source: str, lines: list[bytes], report: IngestReport) -> dict[str, int]:
    """Every line's stored verdict is the validator's; returns the counts."""
    expected = expected_verdicts(lines)
    with connect(db, read_only=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        loaded = {
            row[0]: row[1:]
            for row in conn.execute(
                """SELECT line_no, detection_id, camera_id, ts, label, confidence, bbox, track_id, zone,
                          enrichment::VARCHAR FROM detections WHERE source = ?""",
                [source],
            ).fetchall()
        }
        quarantined = dict(conn.execute("SELECT line_no, reason FROM quarantine WHERE source = ?", [source]).fetchall())
    problems: list[str] = []
    loaded_ids: dict[str, int] = {}
    for line_no, verdict in enumerate(expected, start=1):
        line = lines[line_no - 1][:200]
        if verdict.blank:
            if line_no in loaded or line_no in quarantined:
                problems.append(f"line {line_no} is blank but was stored: {line!r}")
        elif verdict.reason is not None:
            if quarantined.get(line_no) != verdict.reason:
                got = "loaded" if line_no in loaded else quarantined.get(line_no)
                problems.append(f"line {line_no}: validator says {verdict.reason!r}, stored {got!r}: {line!r}")
        else:
            det = verdict.detection
            assert det is not None
            if line_no in quarantined:
                problems.append(f"line {line_no}: valid but quarantined ({quarantined[line_no]!r}): {line!r}")
            elif line_no in loaded:
                row = loaded[line_no]
                stored_enrichment = None if row[8] is None else json.loads(row[8])
                wanted = (det.detection_id, det.camera_id, det.ts, det.label, det.confidence)
                wanted += (None if det.bbox is None else list(det.bbox), det.track_id, det.zone)
                if tuple(row[:8]) != wanted or not _same(stored_enrichment, det.enrichment):
                    problems.append(f"line {line_no}: stored {row!r}, validator {det!r}")
                loaded_ids[det.detection_id] = loaded_ids.get(det.detection_id, 0) + 1
            # else: a duplicate detection_id, checked below
    for line_no in set(quarantined) - {n for n, v in enumerate(expected, 1) if v.reason is not None}:
        problems.append(f"line {line_no}: quarantined but the validator accepts it: {lines[line_no - 1][:200]!r}")
    valid_ids = {v.detection.detection_id for v in expected if v.detection is not None}
    if set(loaded_ids) != valid_ids or any(n != 1 for n in loaded_ids.values()):
        problems.append(f"valid detection ids not stored exactly once: {sorted(valid_ids ^ set(loaded_ids))[:5]}")
    assert not problems, f"{len(problems)} disagreements, first ones:\n" + "\n".join(problems[:10])

    assert all(reason and ":" in reason for reason in quarantined.values())
    counts = {
        "lines": len(lines),
        "loaded": len(loaded),
        "duplicates": sum(1 for v in expected if v.detection is not None) - len(loaded),
        "quarantined": len(quarantined),
        "blank": sum(1 for v in expected if v.blank),
    }
    assert counts["lines"] == counts["loaded"] + counts["duplicates"] + counts["quarantined"] + counts["blank"]
    assert (report.lines, report.loaded, report.duplicates, report.quarantined, report.blank_lines) == (
        counts["lines"],
        counts["loaded"],
        counts["duplicates"],
        counts["quarantined"],
        counts["blank"],
    ), report.summary()
    return counts


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


# ------------------------------------------------------------------------------------------------- the tests
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(st.lists(mutated_line(), min_size=1, max_size=25))
def test_every_mutated_line_is_loaded_or_quarantined_as_the_validator_says(lines: list[bytes]) -> None:
    # A file that starts with gzip's header is read as gzip whatever its name (a corrupt one is an IngestError naming
    # it, tested in tests/storage); a line of text is judged by the validator.
    assume(not lines[0].startswith(GZIP_HEADER))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.jsonl"
        write_lines(path, lines)
        report = ingest_files(Path(tmp) / "hsi.duckdb", [path])
        check_stored(Path(tmp) / "hsi.duckdb", str(path.resolve()), lines, report)


@pytest.mark.slow
def test_100k_fuzzed_lines_nothing_lost_and_fast_path_agrees_with_the_validator(tmp_path: Path) -> None:
    started = time.perf_counter()
    lines = list(bulk_lines(6, BULK_LINES - 1))
    # One line longer than the reader's block (the reader skips it without holding it), next to a valid one.
    lines.insert(5000, b'{"detection_id":"huge","pad":"' + b"h" * (5 << 20) + b'"}')
    path = tmp_path / "fuzz-100k.jsonl"
    write_lines(path, lines)
    generated = time.perf_counter()
    db = tmp_path / "hsi.duckdb"
    report = ingest_files(db, [path])
    ingested = time.perf_counter()
    counts = check_stored(db, str(path.resolve()), lines, report)
    checked = time.perf_counter()
    print(
        f"\nfuzz 100k: {counts}; rescued by the validator {report.files[0].rescued}; "
        f"generate {generated - started:.1f}s, ingest {ingested - generated:.1f}s, check {checked - ingested:.1f}s"
    )
    # The mix is broad: every outcome occurs in volume.
    assert counts["loaded"] > 20_000 and counts["quarantined"] > 40_000 and counts["blank"] > 1000
    assert checked - started < BULK_SECONDS, f"{checked - started:.1f}s"


def test_a_deeply_nested_line_is_quarantined_not_fatal(tmp_path: Path) -> None:
    """Found by this fuzzing: 1000 nested arrays (2 KB) made msgspec raise RecursionError, which stopped the
    whole `hsi ingest`; the fast check now leaves such a line to the validator."""
    deep = b'{"detection_id":"d","enrichment":{"deep":' + b"[" * 1000 + b"]" * 1000 + b"}}"
    lines = [_dump(dict(BASE[0], detection_id="ok-1")), deep, _dump(dict(BASE[1], detection_id="ok-2"))]
    path = tmp_path / "deep.jsonl"
    write_lines(path, lines)
    report = ingest_files(tmp_path / "hsi.duckdb", [path])
    assert (report.loaded, report.quarantined) == (2, 1)
    with connect(tmp_path / "hsi.duckdb", read_only=True) as conn:
        assert conn.execute("SELECT line_no, reason FROM quarantine").fetchall() == [
            (2, "line: not valid JSON (nested too deeply)")
        ]


def test_a_reason_quoting_a_lone_surrogate_is_stored(tmp_path: Path) -> None:
    """Found by this fuzzing: `"ts": "\\ud800"` gave a reason quoting the lone surrogate, which DuckDB refused,
    aborting the chunk's transaction and the whole `hsi ingest`; the reason is now stored with the escape."""
    bad = _dump(dict(BASE[0], detection_id="bad", ts="@@")).replace(b'"@@"', b'"\\ud800"')
    lines = [_dump(dict(BASE[0], detection_id="ok-1")), bad]
    path = tmp_path / "surrogate.jsonl"
    write_lines(path, lines)
    report = ingest_files(tmp_path / "hsi.duckdb", [path])
    assert (report.loaded, report.quarantined) == (1, 1)
    with connect(tmp_path / "hsi.duckdb", read_only=True) as conn:
        ((reason,),) = conn.execute("SELECT reason FROM quarantine").fetchall()
    assert reason.startswith("ts: not RFC 3339") and reason.endswith('got "\\ud800"')


def test_a_rescued_line_resending_an_id_the_fast_path_loaded_is_a_duplicate_not_a_crash(tmp_path: Path) -> None:
    """Found by this fuzzing: a valid line the fast check leaves to the validator (an unknown nested field) with the
    detection_id of a later plain line in the same chunk raised ConstraintException inside the chunk's transaction;
    unregistering the view then failed on the aborted transaction and hid it, so the redo with ON CONFLICT never
    ran and the whole `hsi ingest` stopped. Re-sending a known id is a no-op (contract section 1)."""
    rescued = dict(BASE[0], detection_id="same", enrichment={"scene": {"lighting": "day", "tilt": 2}})
    lines = [_dump(rescued), _dump(dict(BASE[1], detection_id="same")), _dump(dict(BASE[2], detection_id="other"))]
    path = tmp_path / "resend.jsonl"
    write_lines(path, lines)
    report = ingest_files(tmp_path / "hsi.duckdb", [path])
    assert (report.loaded, report.duplicates, report.quarantined) == (2, 1, 0)
    check_stored(tmp_path / "hsi.duckdb", str(path.resolve()), lines, report)
