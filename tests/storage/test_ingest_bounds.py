"""Bounds at ingest (contract section 6, issue #15 item 9): the INGEST_* settings reach the validator and the fast
path; optional enrichment over a bound is cut, loaded, recorded on the row and counted; the fast path agrees."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from hsi_dagster.core.intake.detections import Bounds, Detection, validate_record
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.ingest import ingest_files, ingest_lines
from hsi_dagster.storage.line_reader import check_chunk

REGION = {"label": "person", "caption": "a man in a dark hoodie", "bbox": [0.1, 0.1, 0.4, 0.9]}


def record(detection_id: str, **changes: object) -> dict:
    return {
        "detection_id": detection_id,
        "camera_id": "garage",
        "ts": "2026-12-01T02:14:05.120Z",
        "label": "person",
        "confidence": 0.95,
        **changes,
    }


def rows(db: Path) -> dict[str, tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        found = conn.execute("SELECT detection_id, enrichment, enrichment_cuts FROM detections").fetchall()
    return {d: (json.loads(e) if e else None, json.loads(c) if c else None) for d, e, c in found}


def test_ninety_regions_are_loaded_cut_recorded_on_the_row_and_counted(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    lines = [
        json.dumps(
            record("rich", enrichment={"florence": {"caption": "a man at the garage door", "regions": [REGION] * 90}})
        ),
        json.dumps(record("plain", enrichment={"florence": {"regions": [REGION] * 3}})),
        json.dumps(record("long-label", label="l" * 65)),
    ]
    report = ingest_lines(db, lines)
    assert (report.loaded, report.quarantined, report.cut) == (2, 1, 1)
    assert "1 cut to the bounds" in report.summary()
    stored = rows(db)
    enrichment, cuts = stored["rich"]
    assert len(enrichment["florence"]["regions"]) == 64
    assert cuts == ["enrichment.florence.regions: 90 items cut to the first 64 (INGEST_MAX_FLORENCE_REGIONS=64)"]
    assert stored["plain"][1] is None  # loaded by the fast path: nothing cut, nothing recorded
    with duckdb.connect(str(db), read_only=True) as conn:
        (reason,) = conn.execute("SELECT reason FROM quarantine").fetchone()  # type: ignore[misc]
    assert reason.startswith("label: must be 1-64 characters") and "INGEST_MAX_LABEL_CHARS" in reason
    again = ingest_lines(db, lines)  # idempotent: a re-sent cut detection is a known one, not counted again
    assert (again.loaded, again.duplicates, again.cut) == (0, 2, 0)


def test_the_settings_set_the_bounds_of_a_file_ingest(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [
        record("rich", enrichment={"florence": {"regions": [REGION] * 90}}),
        record("wordy", enrichment={"scene": {"description": "d" * 3000}}),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    roomy = HsiSettings.from_values({"INGEST_MAX_FLORENCE_REGIONS": 100, "INGEST_MAX_TEXT_CHARS": 4000})
    report = ingest_files(tmp_path / "a.duckdb", [path], settings=roomy)
    assert (report.loaded, report.cut) == (2, 0)
    assert len(rows(tmp_path / "a.duckdb")["rich"][0]["florence"]["regions"]) == 90
    tight = HsiSettings.from_values({"INGEST_MAX_LINE_BYTES": 2048})
    report = ingest_files(tmp_path / "b.duckdb", [path], settings=tight)
    assert (report.loaded, report.quarantined) == (0, 2)
    with duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True) as conn:
        reasons = [r for (r,) in conn.execute("SELECT reason FROM quarantine ORDER BY line_no").fetchall()]
    assert all(r.startswith("line: longer than 2048 bytes") and r.endswith("INGEST_MAX_LINE_BYTES)") for r in reasons)


def test_a_line_over_the_bound_longer_than_a_read_block_is_quarantined_unread(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    huge = json.dumps(record("huge", enrichment={"florence": {"caption": "x" * (5 << 20)}}))
    path.write_text(huge + "\n" + json.dumps(record("after")) + "\n")
    report = ingest_files(tmp_path / "hsi.duckdb", [path], settings=HsiSettings.from_values({}))
    assert (report.loaded, report.quarantined) == (1, 1)
    with duckdb.connect(str(tmp_path / "hsi.duckdb"), read_only=True) as conn:
        (reason,) = conn.execute("SELECT reason FROM quarantine").fetchone()  # type: ignore[misc]
    assert reason == f"line: longer than 65536 bytes ({len(huge)}; INGEST_MAX_LINE_BYTES)"


def _near_the_bounds(bounds: Bounds) -> list[str]:
    """Records at, just under and just over each bound, alone and together."""
    out = []
    for n in (bounds.florence_regions - 1, bounds.florence_regions, bounds.florence_regions + 1):
        out.append(record(f"regions-{n}", enrichment={"florence": {"regions": [REGION] * n}}))
    for n in (bounds.clip_classes, bounds.clip_classes + 1):
        out.append(record(f"clip-{n}", enrichment={"clip": [{"label": "a person", "score": 0.5}] * n}))
    for n in (bounds.text_chars, bounds.text_chars + 1):
        out.append(record(f"text-{n}", enrichment={"scene": {"description": "d" * n}}))
    for n in (bounds.label_chars, bounds.label_chars + 1):
        out.append(record(f"label-{n}", label="l" * n))
    for n in (bounds.tag_chars, bounds.tag_chars + 1):
        out.append(record(f"zone-{n}", zone="z" * n, track_id="t" * n))
    out.append(record("big", enrichment={"extra": ["y" * 100] * (bounds.enrichment_bytes // 100)}))
    return [json.dumps(r) for r in out]


@pytest.mark.parametrize(
    "bounds",
    [
        Bounds(),
        Bounds(
            florence_regions=3,
            clip_classes=2,
            text_chars=40,
            label_chars=8,
            tag_chars=5,
            enrichment_bytes=1024,
            line_bytes=4096,
        ),
    ],
)
def test_the_fast_path_accepts_only_what_the_validator_loads_uncut(bounds: Bounds) -> None:
    lines = _near_the_bounds(bounds)
    chunk = check_chunk(np.arange(len(lines), dtype=np.int64), [x.encode() for x in lines], "t", bounds)
    verdicts = {
        int(pos): validate_record(lines[pos], source="t", line_no=pos, bounds=bounds) for pos in range(len(lines))
    }
    for pos in chunk.columns["pos"]:
        result = verdicts[int(pos)]
        assert isinstance(result, Detection) and result.cuts == (), lines[pos][:120]
    over = [pos for pos, v in verdicts.items() if isinstance(v, Detection) and v.cuts]
    assert over and not set(over) & set(map(int, chunk.columns["pos"]))
    rescued = {line_no for line_no, _ in chunk.rescued}
    assert set(over) <= rescued  # every cut detection is loaded, through the validator


def test_ingest_agrees_with_the_validator_under_tight_bounds(tmp_path: Path) -> None:
    tight = {
        "INGEST_MAX_FLORENCE_REGIONS": 3,
        "INGEST_MAX_CLIP_CLASSES": 2,
        "INGEST_MAX_TEXT_CHARS": 40,
        "INGEST_MAX_LABEL_CHARS": 8,
        "INGEST_MAX_TAG_CHARS": 5,
        "INGEST_MAX_ENRICHMENT_BYTES": 1024,
    }
    settings = HsiSettings.from_values(tight)
    bounds = Bounds.from_settings(settings)
    lines = _near_the_bounds(bounds)
    report = ingest_lines(tmp_path / "hsi.duckdb", lines, settings=settings)
    expected = [validate_record(x, source="t", line_no=1, bounds=bounds) for x in lines]
    loaded = {r.detection_id: r for r in expected if isinstance(r, Detection)}
    assert report.loaded == len(loaded) and report.quarantined == len(lines) - len(loaded)
    assert report.cut == sum(1 for r in loaded.values() if r.cuts)
    stored = rows(tmp_path / "hsi.duckdb")
    for detection_id, result in loaded.items():
        assert stored[detection_id] == (result.enrichment, list(result.cuts) or None)
