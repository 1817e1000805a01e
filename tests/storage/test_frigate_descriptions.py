"""A late GenAI description (issue 40 item 6) in a real DuckDB: it joins its track's batch while that batch is open,
is added to it once recorded, and asks for its re-judgement once judged; never a zone-less batch of its own."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.storage.batches import load_batch, pending_windows, record_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import FrigateMessage, FrigateReport, load_frigate_messages
from hsi_dagster.storage.pipeline_tables import save_assessment, save_context, unassessed_batches

RES = {"driveway": (1920, 1080)}
T = datetime(2026, 12, 8, 2, 30, tzinfo=UTC).timestamp()
TEXT = "A man in a balaclava tries the handle of the car's driver door, then walks off."


def car(**changes: Any) -> dict[str, Any]:
    after = {
        "id": f"{T:.6f}-car",
        "camera": "driveway",
        "frame_time": T,
        "label": "car",
        "sub_label": None,
        "top_score": 0.8,
        "false_positive": False,
        "start_time": T,
        "end_time": None,
        "score": 0.8,
        "box": [700, 540, 1180, 880],
        "current_zones": ["street", "driveway"],
        "entered_zones": ["street", "driveway"],
        "stationary": False,
        "path_data": [[[0.2, 0.7], T]],
    }
    after.update(changes)
    return after


def events() -> list[dict[str, Any]]:
    first = car()
    moved = car(frame_time=T + 10, box=[300, 540, 780, 880], path_data=[[[0.2, 0.7], T], [[0.3, 0.8], T + 10]])
    ended = {**moved, "frame_time": T + 100, "end_time": T + 100}  # nothing changed but the time: skipped
    return [
        {"type": "new", "before": {**first, "false_positive": True}, "after": first},
        {"type": "update", "before": copy.deepcopy(first), "after": moved},
        {"type": "end", "before": copy.deepcopy(moved), "after": ended},
    ]


def load(db: Path, payloads: list[tuple[str, dict[str, Any]]], first_line: int) -> FrigateReport:
    messages = [
        FrigateMessage(first_line + i, json.dumps(payload), topic) for i, (topic, payload) in enumerate(payloads)
    ]
    with connect(db) as conn:
        return load_frigate_messages(conn, messages, source="mqtt://test", resolutions=RES)


def description() -> tuple[str, dict[str, Any]]:
    return "frigate/tracked_object_update", {"type": "description", "id": f"{T:.6f}-car", "description": TEXT}


def load_events(db: Path) -> None:
    report = load(db, [("frigate/events", e) for e in events()], 1)
    assert report.detections == 2 and report.unchanged == 1


def recorded_batch(db: Path) -> tuple[str, datetime]:
    """The events loaded and their one batch closed and recorded (not yet judged): its id and the time it closed at."""
    load_events(db)
    as_of = datetime.fromtimestamp(T + 90, UTC)  # the window: the car, still tracked (its end not seen), holds it
    with connect(db) as conn:
        [batch] = pending_windows(conn, BatchRules(), as_of).closed
        record_batch(conn, batch.batch_id, BatchRules(), as_of)
    return batch.batch_id, as_of


def test_a_late_description_joins_its_tracks_open_batch_with_its_zones(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    load_events(db)
    report = load(db, [description()], 10)  # a minute after the car ended
    assert report.detections == 1 and report.joined == 0  # no batch recorded yet: the batching rules place it
    as_of = datetime.fromtimestamp(T + 600, UTC)
    with connect(db) as conn:
        closed = pending_windows(conn, BatchRules(), as_of).closed
        assert len(closed) == 1 and closed[0].detection_count == 3  # one batch: the car and its description
        row = conn.execute(
            "SELECT ts, zone, enrichment FROM detections WHERE detection_id LIKE '%:description:%'"
        ).fetchone()
    assert row[0] == datetime.fromtimestamp(T + 10, UTC)  # the time of the track's latest detection, not its end
    assert row[1] == "street,driveway"
    frigate = json.loads(row[2])["frigate"]
    assert frigate["current_zones"] == ["street", "driveway"] and frigate["follows"].endswith(f":update:{T + 10:.6f}")


def test_a_description_after_its_batch_was_judged_joins_it_and_asks_for_a_rejudgement(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    batch_id, as_of = recorded_batch(db)
    with connect(db) as conn:
        save_context(conn, batch_id, "{}", "full", [])
        save_assessment(conn, {"batch_id": batch_id, "camera_id": "driveway", "status": "ok"})
        assert unassessed_batches(conn) == {}

    report = load(db, [description()], 10)
    assert (report.detections, report.joined, report.rejudged) == (1, 1, 1)
    assert "1 late descriptions joined their batch (1 judged again)" in report.summary()
    with connect(db) as conn:
        row, detections = load_batch(conn, batch_id)
        assert row["detection_count"] == 3 and row["has_late"] is True
        assert [d["detection_id"].split(":")[2] for d in detections] == ["new", "description", "update"]
        assert list(row["detection_ids"]) == [d["detection_id"] for d in detections]
        assert list(unassessed_batches(conn)) == [batch_id]  # the sensor and `hsi process` run it again
        assert pending_windows(conn, BatchRules(), as_of + timedelta(hours=1)).closed == []  # no batch of its own

    assert load(db, [description()], 20).joined == 0  # a redelivery changes nothing

    with connect(db) as conn:  # the batch's run: a new context, then a new assessment
        save_context(conn, batch_id, "{}", "full", [])
        assert list(unassessed_batches(conn)) == [batch_id]  # the context alone is not a verdict
        save_assessment(conn, {"batch_id": batch_id, "camera_id": "driveway", "status": "ok"})
        assert unassessed_batches(conn) == {}


def test_a_description_of_a_recorded_batch_not_yet_judged_joins_it_without_a_rejudgement(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    batch_id, _ = recorded_batch(db)
    report = load(db, [description()], 10)
    assert (report.joined, report.rejudged) == (1, 0)
    with connect(db) as conn:
        assert load_batch(conn, batch_id)[0]["detection_count"] == 3
        assert list(unassessed_batches(conn)) == [batch_id]  # judged for the first time, description included
