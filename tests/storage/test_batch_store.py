"""Batches in DuckDB: pending closed ones, recording them once, late detections, listing and loading."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.core.intake.batching import BatchRules, assign_batches, closed_batches
from hsi_dagster.storage.batches import (
    BatchNotClosed,
    BatchNotFound,
    list_batches,
    load_batch,
    pending_closed_batches,
    pending_windows,
    record_batch,
)
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.synthetic.streams import simulate
from tests.support.records import detection_ref

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
RULES = BatchRules()


def record_closed_batches(conn, rules: BatchRules, as_of: datetime):
    """Record every closed window through the production path (one record_batch each, as the asset does)."""
    return [record_batch(conn, b.batch_id, rules, as_of) for b in pending_closed_batches(conn, rules, as_of)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def det(
    detection_id: str, seconds: float, camera: str = "cam", label: str = "car", confidence: float = 0.6, **extra
) -> str:
    record = {
        "detection_id": detection_id,
        "camera_id": camera,
        "ts": at(seconds).isoformat().replace("+00:00", "Z"),
        "label": label,
        "confidence": confidence,
        **extra,
    }
    return json.dumps(record)


@pytest.fixture
def conn(tmp_path: Path):
    with connect(tmp_path / "hsi.duckdb") as connection:
        yield connection


def assigned(conn, detection_id: str) -> str | None:
    return conn.execute("SELECT batch_id FROM detections WHERE detection_id = ?", [detection_id]).fetchone()[0]


def test_pending_windows_say_when_the_answer_may_change_next(conn) -> None:
    """A sensor waits for next_change: an open window's close, or an unassigned detection coming into view."""
    ingest_lines(conn, [det("a", 0), det("b", 10), det("c", 100, camera="other")])
    early = pending_windows(conn, RULES, at(20))
    assert early.closed == [] and early.next_close == at(40) and early.next_in_view == at(100)
    assert early.next_change == at(40)
    later = pending_windows(conn, RULES, at(60))
    assert [b.detection_ids for b in later.closed] == [("a", "b")]
    assert later.next_close is None and later.next_change == at(100)
    done = pending_windows(conn, RULES, at(200))
    assert done.next_close is None and done.next_in_view is None and done.next_change is None


def test_pending_closed_batches_match_the_pure_rules(conn) -> None:
    records = list(simulate(2, start=T0, duration_s=3600, events_per_hour=60))
    ingest_lines(conn, [json.dumps(r) for r in records])
    as_of = at(1800)
    refs = [detection_ref(r) for r in records]
    expected = closed_batches(assign_batches([r for r in refs if r.ts <= as_of], RULES), as_of)
    pending = pending_closed_batches(conn, RULES, as_of)
    assert pending == expected and len(pending) > 20
    assert [(b.closes_at, b.batch_id) for b in pending] == sorted((b.closes_at, b.batch_id) for b in pending)
    assert pending_closed_batches(conn, RULES, as_of, limit=5) == pending[:5]


def test_record_batch_assigns_its_detections_once(conn) -> None:
    ingest_lines(conn, [det("a1", 0), det("a2", 10), det("b1", 60), det("p1", 5, label="person", confidence=0.95)])
    as_of = at(200)
    pending = pending_closed_batches(conn, RULES, as_of)
    assert [b.detection_ids for b in pending] == [("p1",), ("a1", "a2"), ("b1",)]
    first = pending[1]
    recorded = record_batch(conn, first.batch_id, RULES, as_of)
    assert recorded == first
    assert (assigned(conn, "a1"), assigned(conn, "a2"), assigned(conn, "b1")) == (first.batch_id, first.batch_id, None)
    row = conn.execute(
        "SELECT detection_count, detection_ids, labels, close_reason, has_late FROM detection_batches"
    ).fetchall()
    assert row == [(2, ["a1", "a2"], ["car", "car"], "idle", False)]
    before = conn.execute("SELECT * FROM detection_batches").fetchall()
    again = record_batch(conn, first.batch_id, RULES, at(5000))  # idempotent, even at another time
    assert again.detection_ids == first.detection_ids and again.closes_at == first.closes_at
    assert conn.execute("SELECT * FROM detection_batches").fetchall() == before
    assert [b.batch_id for b in pending_closed_batches(conn, RULES, as_of)] == [
        pending[0].batch_id,
        pending[2].batch_id,
    ]


def test_unknown_and_open_batches_are_refused(conn) -> None:
    ingest_lines(conn, [det("a1", 0), det("a2", 10)])
    (batch,) = pending_closed_batches(conn, RULES, at(40))
    with pytest.raises(BatchNotClosed, match=batch.batch_id):
        record_batch(conn, batch.batch_id, RULES, at(39))
    with pytest.raises(BatchNotFound, match="cam__nothing"):
        record_batch(conn, "cam__nothing__0", RULES, at(40))
    assert assigned(conn, "a1") is None
    assert record_batch(conn, batch.batch_id, RULES, at(40)).batch_id == batch.batch_id


def test_a_late_detection_lands_in_a_new_batch_marked_late(conn) -> None:
    ingest_lines(conn, [det("a1", 0), det("a2", 10), det("a3", 100)], source="first")
    (first,) = record_closed_batches(conn, RULES, at(60))  # a1, a2 closed at 40; a3 still open
    ingest_lines(conn, [det("late", 20), det("on-time", 101)], source="second")
    flags = dict(conn.execute("SELECT detection_id, is_late FROM detections").fetchall())
    assert flags == {"a1": False, "a2": False, "a3": False, "late": True, "on-time": False}
    assert conn.execute("SELECT detection_ids FROM detection_batches").fetchall() == [(["a1", "a2"],)]  # untouched
    batches = record_closed_batches(conn, RULES, at(500))
    assert [b.detection_ids for b in batches] == [("late",), ("a3", "on-time")]
    late = dict(conn.execute("SELECT batch_id, has_late FROM detection_batches").fetchall())
    assert late == {first.batch_id: False, batches[0].batch_id: True, batches[1].batch_id: False}
    assert conn.execute("SELECT count(*) FROM detections WHERE batch_id IS NULL").fetchone() == (0,)


def test_fast_path_batches_do_not_make_earlier_detections_late(conn) -> None:
    ingest_lines(conn, [det("p", 30, label="person", confidence=0.99)])
    record_closed_batches(conn, RULES, at(60))
    ingest_lines(conn, [det("car", 10)], source="later")
    assert conn.execute("SELECT is_late FROM detections WHERE detection_id = 'car'").fetchone() == (False,)


def test_list_batches_shows_recorded_closed_and_open(conn) -> None:
    ingest_lines(conn, [det("a1", 0), det("b1", 100), det("c1", 300), det("x1", 0, camera="other...cam")])
    record_batch(conn, pending_closed_batches(conn, RULES, at(310))[0].batch_id, RULES, at(310))
    listing = list_batches(conn, RULES, at(310))
    summary = [(b["detection_ids"], b["state"], b["close_reason"]) for b in listing]
    assert summary == [
        (["a1"], "recorded", "idle"),
        (["x1"], "closed", "idle"),
        (["b1"], "closed", "idle"),
        (["c1"], "open", "open"),
    ]
    for row in listing:
        assert set(row) >= {"batch_id", "camera_id", "started_at", "closes_at", "close_reason", "detection_ids"}
        assert row["started_at"].tzinfo is not None
    other = next(b for b in listing if b["camera_id"] == "other...cam")
    assert "..." not in other["batch_id"]
    assert record_batch(conn, other["batch_id"], RULES, at(310)).camera_id == "other...cam"
    assert list_batches(conn, RULES, at(50))[0]["detection_ids"] == ["a1"]  # later batches had not started


def test_load_batch_returns_full_detections_with_parsed_enrichment(conn) -> None:
    enrichment = {"florence": {"caption": "a car"}, "sam_masks": {"count": 2}}
    ingest_lines(conn, [det("a2", 10, bbox=[0.1, 0.1, 0.2, 0.3], zone="drive"), det("a1", 0, enrichment=enrichment)])
    (batch,) = record_closed_batches(conn, RULES, at(100))
    row, detections = load_batch(conn, batch.batch_id)
    assert row["batch_id"] == batch.batch_id and row["detection_ids"] == ["a1", "a2"] and row["started_at"] == at(0)
    assert [d["detection_id"] for d in detections] == ["a1", "a2"]
    assert detections[0]["enrichment"] == enrichment and detections[1]["enrichment"] is None
    assert detections[1]["bbox"] == [0.1, 0.1, 0.2, 0.3] and detections[1]["zone"] == "drive"
    assert detections[0]["ts"] == at(0) and detections[0]["source"] == "<memory>"
    with pytest.raises(BatchNotFound):
        load_batch(conn, "cam__missing__0")


def test_recording_keeps_later_batch_ids_stable(conn) -> None:
    ingest_lines(conn, [det(f"d{n}", n * 40) for n in range(6)])
    before = [b.batch_id for b in pending_closed_batches(conn, RULES, at(1000))]
    record_batch(conn, before[2], RULES, at(1000))
    after = [b.batch_id for b in pending_closed_batches(conn, RULES, at(1000))]
    assert after == before[:2] + before[3:]


def test_naive_as_of_is_refused(conn) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pending_closed_batches(conn, RULES, datetime(2026, 12, 1))
