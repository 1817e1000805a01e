"""Dwell survives batching (issue 40 item 5): a person standing on the front step for three minutes, reported by
Frigate once a minute with nothing changed, goes the real way (mapping -> DuckDB -> batching -> context -> floor) and
stays window-length batches, each of which the loitering rule fires on; not one short batch per update."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.core.context.camera_profiles import parse_camera_profiles
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import context_for_batch, floor_for
from hsi_dagster.storage.batches import load_batch, pending_windows, record_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import FrigateMessage, load_frigate_messages

RES = {"front_door": (1280, 720)}
T = datetime(2026, 12, 8, 2, 30, tzinfo=UTC).timestamp()  # 02:30 in Europe/London (GMT in December)
PROFILES = parse_camera_profiles(
    """
cameras:
  front_door:
    timezone: Europe/London
    zones: [walkway, front_door]
    entry_zones: [front_door]
""",
    source="test",
)
SETTINGS = HsiSettings(_env_file=None)  # type: ignore[call-arg]


def person(at: float, **changes: Any) -> dict[str, Any]:
    after = {
        "id": f"{T:.6f}-p1",
        "camera": "front_door",
        "frame_time": at,
        "label": "person",
        "sub_label": None,
        "top_score": 0.84,
        "false_positive": False,
        "start_time": T,
        "end_time": None,
        "score": 0.82,  # under FAST_PATH_CONFIDENCE: regular batches
        "box": [600, 200, 760, 700],
        "current_zones": ["walkway"],
        "entered_zones": ["walkway"],
        "stationary": False,
        "motionless_count": 0,
    }
    after.update(changes)
    return after


def step_stay(minutes: int = 3) -> list[dict[str, Any]]:
    """`new` on the walkway, onto the step (zones change), still (stationary), then an unchanged update once a
    minute, then `end`: Frigate's events for someone standing at the door for `minutes` minutes."""
    walk = person(T)
    step = person(
        T + 3, current_zones=["front_door"], entered_zones=["walkway", "front_door"], box=[620, 210, 780, 710]
    )
    still = {**step, "frame_time": T + 5, "stationary": True, "motionless_count": 25}
    payloads = [
        {"type": "new", "before": {**walk, "false_positive": True}, "after": walk},
        {"type": "update", "before": copy.deepcopy(walk), "after": step},
        {"type": "update", "before": copy.deepcopy(step), "after": still},
    ]
    previous = still
    for minute in range(1, minutes + 1):
        later = {**previous, "frame_time": T + 5 + 60 * minute, "motionless_count": 25 + 300 * minute}
        payloads.append({"type": "update", "before": copy.deepcopy(previous), "after": later})
        previous = later
    ended = {**previous, "frame_time": previous["frame_time"] + 2, "end_time": previous["frame_time"] + 2}
    payloads.append({"type": "end", "before": copy.deepcopy(previous), "after": ended})
    return payloads


def load(db: Path, payloads: list[dict[str, Any]]) -> None:
    messages = [FrigateMessage(n, json.dumps(p), "frigate/events") for n, p in enumerate(payloads, start=1)]
    with connect(db) as conn:
        report = load_frigate_messages(conn, messages, source="mqtt://test", resolutions=RES)
    assert report.detections == len(payloads) and report.unchanged == 0  # a person's updates are kept (dwell)


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T + seconds, UTC)


def test_three_minutes_on_the_step_are_two_window_length_batches_and_loitering_fires(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    load(db, step_stay(3))
    rules = BatchRules.from_settings(SETTINGS)
    with connect(db) as conn:
        closed = pending_windows(conn, rules, at(3600)).closed
        assert [(b.close_reason, b.detection_count) for b in closed] == [("window", 4), ("window", 3)]
        assert [(b.last_ts - b.started_at).total_seconds() for b in closed] == [65.0, 62.0]  # not 5 s, 0 s, 0 s, 2 s
        floors = []
        for batch in closed:
            record_batch(conn, batch.batch_id, rules, at(3600))
            row, detections = load_batch(conn, batch.batch_id)
            context = context_for_batch(row, detections, SETTINGS, camera_profile=PROFILES["front_door"])
            floors.append(floor_for(context, PROFILES["front_door"], None, SETTINGS))
    for floor, stays in zip(floors, ("65 s", "187 s"), strict=True):
        loitering = [r for r in floor.reasons if r.startswith("loitering in the dark")]
        assert loitering and f"stays {stays}" in loitering[0], floor.reasons
        assert floor.level == "high"  # a stranger on the entry zone at night


def test_the_once_a_minute_updates_were_fragments_without_the_hold(tmp_path: Path) -> None:
    """BATCH_TRACK_HOLD_SECONDS=0: the contract's plain idle rule, one batch per update (what issue 40 measured)."""
    db = tmp_path / "hsi.duckdb"
    load(db, step_stay(3))
    with connect(db) as conn:
        closed = pending_windows(conn, BatchRules(track_hold_seconds=0), at(3600)).closed
    assert [b.detection_count for b in closed] == [3, 1, 1, 2]


def test_a_live_batch_waits_for_the_next_update_while_frigate_still_tracks_the_person(tmp_path: Path) -> None:
    """Live, as the window sensor sees it: 30 s after the person stood still the batch is not closed (the person is
    still tracked: its next update is due within a minute); the update joins it, and the window then closes it."""
    db = tmp_path / "hsi.duckdb"
    payloads = step_stay(3)
    load(db, payloads[:3])  # new, onto the step, still at T+5
    rules = BatchRules.from_settings(SETTINGS)
    with connect(db) as conn:
        early = pending_windows(conn, rules, at(40))
        assert early.closed == [] and early.next_close == at(5 + 65)
    load(db, payloads[3:4])  # the unchanged update at T+65
    with connect(db) as conn:
        later = pending_windows(conn, rules, at(66))
        assert later.closed == [] and later.next_close == at(90)  # the window bounds the hold
        [batch] = pending_windows(conn, rules, at(90)).closed
        assert batch.detection_count == 4 and batch.close_reason == "window"


def test_the_end_releases_the_hold(tmp_path: Path) -> None:
    """Once Frigate ended the track, the batch closes by the plain idle timeout: nothing else is coming."""
    db = tmp_path / "hsi.duckdb"
    payloads = step_stay(0)  # new, step, still at T+5, end at T+7
    load(db, payloads)
    with connect(db) as conn:
        [batch] = pending_windows(conn, BatchRules.from_settings(SETTINGS), at(37)).closed
    assert batch.close_reason == "idle" and batch.closes_at == at(7) + timedelta(seconds=30)
