"""frigate_writeback_sensor against a small HTTP server that records the calls (fault injection: no Frigate can run
here, and the faults (5xx, 404, no server) are the point): the description keeps Frigate's text, the sub label is
set for high/critical only and never over a face name, a 4xx is not retried, a 5xx or an absent Frigate is retried
and never blocks a tick or the pipeline."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from hsi_dagster.core.outbound.frigate_writeback import MAX_ATTEMPTS
from hsi_dagster.resources import PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.sensors import frigate_writeback_sensor
from hsi_dagster.sensors.frigate_writeback import write_back_pending
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.db import connect
from tests.support.loopback import JsonHandler, serve_on_loopback
from tests.support.mosquitto import free_port
from tests.support.verdicts import database, save_verdict


class RecordingFrigate:
    """Frigate's event endpoints in memory; `fail` maps an event id to the HTTP status its calls answer."""

    def __init__(self, events: dict[str, dict[str, Any]]) -> None:
        self.events = events
        self.fail: dict[str, int] = {}
        self.calls: list[tuple[str, str, Any]] = []


@contextmanager
def serve(fake: RecordingFrigate) -> Iterator[str]:
    class Handler(JsonHandler):
        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            fake.calls.append((method, self.path, body))
            parts = self.path.strip("/").split("/")  # api, events, <id>[, description|sub_label]
            event_id = parts[2] if len(parts) >= 3 else ""
            if event_id in fake.fail:
                return self.send_json(fake.fail[event_id], {"success": False, "message": "injected"})
            event = fake.events.get(event_id)
            if event is None:
                return self.send_json(404, {"success": False, "message": f"Event {event_id} not found"})
            if method == "GET":
                return self.send_json(200, event)
            if parts[-1] == "description":
                event.setdefault("data", {})["description"] = body["description"]
            elif parts[-1] == "sub_label":
                event["sub_label"] = body["subLabel"]
            return self.send_json(200, {"success": True})

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._handle("GET")

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self._handle("POST")

    with serve_on_loopback(Handler) as url:
        yield url


def frigate_batch(db: Path, batch_id: str, camera: str, event_ids: list[str], score: int, summary: str) -> None:
    """A batch whose detections came from Frigate events (detection ids `frigate:<id>:api`, track_id = event id)."""
    ts = datetime.now(UTC) - timedelta(minutes=5)
    with connect(db) as conn:
        for event_id in event_ids:
            conn.execute(
                "INSERT INTO detections (detection_id, camera_id, ts, label, confidence, track_id, ingested_at, "
                "batch_id) VALUES (?, ?, ?, 'person', 0.9, ?, ?, ?)",
                [f"frigate:{event_id}:api", camera, ts, event_id, ts, batch_id],
            )
    save_verdict(db, batch_id, camera, score, datetime.now(UTC), summary=summary)


def test_description_and_sub_label_written_back_without_losing_frigates_own(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    fake = RecordingFrigate(
        {
            "e1": {"id": "e1", "data": {"description": "A person walks up the drive."}, "sub_label": None},
            "e2": {"id": "e2", "data": {}, "sub_label": ["Alice", 0.93]},  # a recognised face
            "e3": {"id": "e3", "data": {"description": "A cat."}, "sub_label": None},
        }
    )
    frigate_batch(db, "b-high", "drive", ["e1", "e2"], 72, "Person tries the car doors at night.")
    frigate_batch(db, "b-low", "garden", ["e3"], 10, "A cat crosses the lawn.")
    save_verdict(db, "b-not-frigate", "yard", 90, datetime.now(UTC))  # no Frigate detections: not written back
    with serve(fake) as url:
        report = write_back_pending(database(db), FrigateResource(url=url), "both")
        assert (report.done, report.failed, report.retry) == (2, 0, 0)
        again = write_back_pending(database(db), FrigateResource(url=url), "both")
    assert (again.done, again.failed, again.retry) == (0, 0, 0)  # written once
    assert fake.events["e1"]["data"]["description"] == (
        "A person walks up the drive.\n\nHSI risk: HIGH (72/100): Person tries the car doors at night."
    )
    assert fake.events["e1"]["sub_label"] == "risk high"
    assert fake.events["e2"]["sub_label"] == ["Alice", 0.93]  # a face name is never overwritten
    assert fake.events["e3"]["data"]["description"] == "A cat.\n\nHSI risk: LOW (10/100): A cat crosses the lawn."
    assert fake.events["e3"]["sub_label"] is None  # sub labels for high/critical only
    assert not [c for c in fake.calls if "b-not-frigate" in c[1]]

    # assessed again: hsi's line replaced, not repeated
    with connect(db) as conn:
        conn.execute("DELETE FROM frigate_writebacks WHERE batch_id = 'b-low'")
    save_verdict(db, "b-low", "garden", 35, datetime.now(UTC), summary="A fox, not a cat.")
    with serve(fake) as url:
        write_back_pending(database(db), FrigateResource(url=url), "description")
    assert fake.events["e3"]["data"]["description"] == "A cat.\n\nHSI risk: MEDIUM (35/100): A fox, not a cat."


def test_a_4xx_is_not_retried_a_5xx_is_and_an_absent_frigate_never_blocks(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    fake = RecordingFrigate({"ok": {"id": "ok", "data": {}}, "flaky": {"id": "flaky", "data": {}}})
    frigate_batch(db, "b-gone", "drive", ["gone"], 80, "s")  # 404: the event is gone
    frigate_batch(db, "b-flaky", "drive", ["flaky"], 80, "s")
    frigate_batch(db, "b-ok", "drive", ["ok"], 80, "s")
    fake.fail["flaky"] = 503
    with serve(fake) as url:
        first = write_back_pending(database(db), FrigateResource(url=url), "description")
        assert (first.done, first.failed, first.retry) == (1, 1, 1)
        del fake.fail["flaky"]
        second = write_back_pending(database(db), FrigateResource(url=url), "description")
        assert (second.done, second.failed, second.retry) == (1, 0, 0)
    with connect(db, read_only=True) as conn:
        rows = dict(conn.execute("SELECT batch_id, status FROM frigate_writebacks").fetchall())
    assert rows["b-gone"].startswith("failed: GET") and "HTTP 404" in rows["b-gone"]
    assert rows["b-flaky"] == rows["b-ok"] == "done"

    # no Frigate at all: a short tick, retried MAX_ATTEMPTS times, then given up; never an exception
    frigate_batch(db, "b-later", "drive", ["later"], 90, "s")
    absent = FrigateResource(url=f"http://127.0.0.1:{free_port()}", timeout_seconds=2)
    for attempt in range(MAX_ATTEMPTS - 1):
        report = write_back_pending(database(db), absent, "both")
        assert report.unreachable and "ConnectError" in report.unreachable, attempt
    assert write_back_pending(database(db), absent, "both").failed == 1  # the last attempt: given up
    assert write_back_pending(database(db), absent, "both").summary().startswith("0 verdicts")  # nothing left
    with connect(db, read_only=True) as conn:
        rows = dict(conn.execute("SELECT batch_id, status FROM frigate_writebacks").fetchall())
    assert rows["b-later"].startswith("failed: ")


def test_the_sensor_is_off_by_default_and_never_raises(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    frigate_batch(db, "b", "drive", ["e"], 90, "s")

    def tick(url: str, **settings: Any) -> str:
        values = load_settings(env_file="/dev/null", HSI_DUCKDB_PATH=str(db), **settings)
        context = dg.build_sensor_context(
            resources={
                "duckdb": database(db),
                "frigate": FrigateResource(url=url, timeout_seconds=2),
                "pipeline_settings": PipelineSettingsResource.from_settings(values),
            }
        )
        result = frigate_writeback_sensor(context)
        assert isinstance(result, dg.SkipReason)
        return result.skip_message or ""

    assert tick("http://127.0.0.1:1") == "FRIGATE_WRITEBACK is off"
    assert tick("", FRIGATE_WRITEBACK="both") == "FRIGATE_URL is not set"
    assert "Frigate did not answer" in tick(f"http://127.0.0.1:{free_port()}", FRIGATE_WRITEBACK="both")


def test_a_floor_only_verdict_is_written_back_with_the_floors_reasons(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    fake = RecordingFrigate({"e9": {"id": "e9", "data": {}, "sub_label": None}})
    frigate_batch(db, "b-floor", "gate", ["e9"], 85, "")
    with connect(db) as conn:
        conn.execute(
            "UPDATE risk_assessments SET status = 'floor_only', floor_reasons = ? WHERE batch_id = 'b-floor'",
            [json.dumps(["weapon: knife (label)"])],
        )
    with serve(fake) as url:
        assert write_back_pending(database(db), FrigateResource(url=url), "both").done == 1
    assert fake.events["e9"]["data"]["description"] == "HSI risk: CRITICAL (85/100): weapon: knife (label)"
    assert fake.events["e9"]["sub_label"] == "risk critical"
