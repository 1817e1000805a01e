"""The Frigate pull: FrigateResource's paging of `/api/events` and `frigate_events_sensor`, against a fake Frigate
API serving recorded answers (tests/support/fake_frigate.py: no Frigate server can run here), including pages
that end inside a group of events sharing one start_time."""

from __future__ import annotations

import copy
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hsi_dagster.core.frigate.api_cursor import ApiCursor
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateApiError, FrigateResource
from hsi_dagster.sensors import frigate_events_sensor
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.db import connect
from hsi_dagster.synthetic.frigate import frigate_night
from tests.support.fake_frigate import FakeFrigate, serve_frigate


def event(identifier: str, start: float) -> dict[str, Any]:
    return {"id": identifier, "camera": "yard", "label": "person", "start_time": start, "end_time": start + 5}


def test_paging_is_ascending_strict_and_loses_no_event_that_shares_a_start_time_with_a_page_end() -> None:
    starts = [10, 20, 20, 20, 30, 40, 40, 50, 60, 60, 60, 60, 60, 70]
    events = [event(f"e{i:02d}", float(start)) for i, start in enumerate(starts)]
    fake = FakeFrigate(events)
    with serve_frigate(fake) as url:
        got = FrigateResource(url=url, page_size=3).events_after(0.0)
        tail = FrigateResource(url=url, page_size=3).events_after(40.0)
    assert [e["id"] for e in got] == [e["id"] for e in events]  # each once, oldest first
    assert [e["id"] for e in tail] == [e["id"] for e in events if e["start_time"] > 40]
    queries = [q for path, q in fake.requests if path == "/api/events"]
    assert all(q["sort"] == "date_asc" for q in queries)
    assert any(int(q["limit"]) > 3 for q in queries)  # five events at 60: a page of peers was asked again, larger


def test_a_server_that_ignores_the_sort_is_refused_with_a_clear_error() -> None:
    class OldFrigate(FakeFrigate):
        def answer_events(self, query: dict[str, str]) -> list[dict[str, Any]]:
            return super().answer_events({k: v for k, v in query.items() if k != "sort"})

    old = OldFrigate([event(f"e{i}", float(i)) for i in range(10)])
    with serve_frigate(old) as url, pytest.raises(FrigateApiError, match="newest first"):
        FrigateResource(url=url, page_size=3).events_after(0.0)
    with pytest.raises(FrigateApiError, match="FRIGATE_URL is not set"):
        FrigateResource(url="").events_after(0.0)


def tick(db: Path, url: str, cursor: str | None, **settings: str) -> tuple[str | None, str]:
    resources = {
        "frigate": FrigateResource(url=url, page_size=2, settle_seconds=30),
        "duckdb": HsiDuckDBResource(database=str(db)),
        "pipeline_settings": PipelineSettingsResource.from_settings(load_settings(os.devnull, **settings)),
    }
    with dg.build_sensor_context(cursor=cursor, resources=resources) as context:
        result = frigate_events_sensor.evaluate_tick(context)
    assert not result.run_requests
    return result.cursor, result.skip_message or ""


def stored(db: Path) -> list[tuple[str, str, str | None]]:
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT detection_id, label, zone FROM detections ORDER BY ts, detection_id").fetchall()


def test_the_sensor_ingests_each_ended_event_once_and_waits_for_the_one_in_progress(tmp_path: Path) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=55)
    _, items = frigate_night(seed=2, start=start)  # the parked car is still in progress
    assert [i["end_time"] is None for i in items] == [False, True, False, False]
    fake = FakeFrigate(copy.deepcopy(items))
    db = tmp_path / "hsi.duckdb"
    with serve_frigate(fake) as url:
        cursor, message = tick(db, url, None)
        first = stored(db)
        assert {d[0] for d in first} == {f"frigate:{i['id']}:api" for i in items if i["end_time"] is not None}
        assert ApiCursor.from_json(cursor).after == items[0]["start_time"]  # held just before the parked car
        assert "1 still in progress" in message

        cursor, _ = tick(db, url, cursor)  # nothing new: the events after the car are not sent again
        assert stored(db) == first

        fake.events[1]["end_time"] = time.time() - 120  # the car left
        fake.events[1]["sub_label"] = "Dad's car"  # a plate of Frigate's lpr.known_plates: named, with its score
        fake.events[1]["data"]["sub_label_score"] = 0.93
        cursor, _ = tick(db, url, cursor)
    final = stored(db)
    assert len(final) == 4 and (f"frigate:{items[1]['id']}:api", "car", "street,driveway") in final
    assert ApiCursor.from_json(cursor) == ApiCursor(items[-1]["start_time"])
    with connect(db, read_only=True) as conn:
        (messages, detections) = conn.execute("SELECT messages, detections FROM frigate_sources").fetchone()
        reid = conn.execute("SELECT enrichment->>'$.reid.identity' FROM detections WHERE label = 'car'").fetchone()
    assert messages == detections == 4  # every event was sent to the ingest once
    assert reid == ("Dad's car",)


def test_the_sensor_skips_without_a_url_and_a_malformed_event_is_quarantined(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    cursor, message = tick(db, "", None)
    assert cursor is None and "FRIGATE_URL is not set" in message
    bad = {**event("broken", time.time() - 4000), "data": {"box": [0.9, 0.1, 0.5, 0.5], "top_score": 0.8}}
    with serve_frigate(FakeFrigate([bad])) as url:
        tick(db, url, None)
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT source, line_no, raw, reason FROM quarantine").fetchall()
    assert len(rows) == 1 and rows[0][0] == f"{url}/api/events" and rows[0][1] == 1
    assert rows[0][3].startswith("data.box:") and json.loads(rows[0][2])["id"] == "broken"


def test_the_sensor_applies_the_ingest_bounds_of_the_settings(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    scored = {**event("long-label", time.time() - 4000), "data": {"box": [0.1, 0.1, 0.5, 0.5], "top_score": 0.8}}
    with serve_frigate(FakeFrigate([scored])) as url:
        tick(db, url, None, INGEST_MAX_LABEL_CHARS="3")
    with connect(db, read_only=True) as conn:
        reasons = [row[0] for row in conn.execute("SELECT reason FROM quarantine").fetchall()]
    assert len(reasons) == 1 and "INGEST_MAX_LABEL_CHARS" in reasons[0]


def test_a_frigate_url_with_credentials_never_reaches_the_stored_source(tmp_path: Path) -> None:
    """FRIGATE_URL may carry a user and password (a reverse proxy): rows name the endpoint without them."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=55)
    _, items = frigate_night(seed=2, start=start)
    db = tmp_path / "hsi.duckdb"
    with serve_frigate(FakeFrigate(copy.deepcopy(items))) as url:
        secret = url.replace("http://", "http://viewer:s3cret@")
        tick(db, secret, None)
    with connect(db, read_only=True) as conn:
        (source,) = conn.execute("SELECT source FROM frigate_sources").fetchone()
    assert source == f"{url}/api/events" and "s3cret" not in source
