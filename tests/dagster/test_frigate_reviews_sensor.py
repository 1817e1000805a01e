"""The `/api/review` pull (issue 40 item 4 for a household on the HTTP API): FrigateResource.reviews_after and
`frigate_reviews_sensor` into a real DuckDB. Frigate is the fake of tests/support/fake_frigate.py: fixture and fault
input (no Frigate server can run here), answering as frigate/api/review.py does (newest first, no offset, both time
filters Frigate has used, per-user `reviewed`), and failing on demand for the Frigate-down cases."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.core.frigate.api_cursor import ReviewCursor
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.frigate import FrigateApiError, FrigateResource
from hsi_dagster.sensors import batch_window_sensor, frigate_reviews_sensor
from hsi_dagster.storage.batches import load_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import load_live_messages, reviews_covering
from hsi_dagster.storage.pipeline_tables import load_context_json, save_assessment
from tests.support.fake_frigate import FakeFrigate, serve_frigate
from tests.support.pipeline_helpers import materialize_request, resources, sensor_tick

SETTLE = 30.0


def item(identifier: str, start: float, end: float | None, camera: str = "yard", **changes: Any) -> dict[str, Any]:
    review = {
        "id": identifier,
        "camera": camera,
        "start_time": start,
        "end_time": end,
        "severity": "detection",
        "thumb_path": f"/media/frigate/clips/review/thumb-{identifier}.webp",
        "has_been_reviewed": False,
        "data": {"detections": [f"{identifier}-obj"], "objects": ["person"], "zones": ["driveway"], "audio": []},
    }
    review.update(changes)
    return review


def tick(db: Path, url: str, cursor: str | None) -> tuple[str | None, str]:
    resources = {
        "frigate": FrigateResource(url=url, page_size=2, settle_seconds=SETTLE),
        "duckdb": HsiDuckDBResource(database=str(db)),
    }
    with dg.build_sensor_context(cursor=cursor, resources=resources) as context:
        result = frigate_reviews_sensor.evaluate_tick(context)
    assert not result.run_requests
    return result.cursor, result.skip_message or ""


def rows(db: Path) -> list[tuple[Any, ...]]:
    with connect(db, read_only=True) as conn:
        return conn.execute(
            "SELECT review_id, camera_id, end_time IS NULL, severity, threat_level FROM frigate_reviews ORDER BY 1"
        ).fetchall()


def tallies(db: Path) -> int:
    with connect(db, read_only=True) as conn:
        return int(conn.execute("SELECT sum(messages) FROM frigate_sources").fetchone()[0])


def test_the_whole_answer_is_read_in_growing_pages_reviewed_or_not() -> None:
    now = time.time()
    reviews = [item(f"r{i}", now - 3000 + 60 * i, now - 2900 + 60 * i, has_been_reviewed=i % 3 == 0) for i in range(7)]
    fake = FakeFrigate([], reviews=reviews)
    with serve_frigate(fake) as url:
        got = FrigateResource(url=url, page_size=2).reviews_after(0.0)
        tail = FrigateResource(url=url, page_size=2).reviews_after(reviews[3]["start_time"])
    assert [r["id"] for r in got] == [f"r{i}" for i in range(7)]  # each once, oldest first, reviewed ones too
    assert [r["id"] for r in tail] == ["r4", "r5", "r6"]
    queries = [q for path, q in fake.requests if path == "/api/review"]
    assert {q["reviewed"] for q in queries} == {"0", "1"}
    assert max(int(q["limit"]) for q in queries) == 8  # 2 -> 4 -> 8: answers came back full until the last


@pytest.mark.parametrize("overlapping", [False, True], ids=["frigate-0.14-0.16", "frigate-0.17+"])
def test_cursor_ticks_idempotency_and_an_in_progress_review_that_ends(tmp_path: Path, overlapping: bool) -> None:
    db = tmp_path / "hsi.duckdb"
    now = time.time()
    done = item("done", now - 600, now - 560)
    running = item("running", now - 300, None)  # in progress: stored now, read again until it ended
    later = item("later", now - 200, now - 150, camera="garden")
    fake = FakeFrigate([], reviews=[done, running, later], overlapping=overlapping)
    with serve_frigate(fake) as url:
        cursor, message = tick(db, url, None)
        assert rows(db) == [
            ("done", "yard", False, "detection", None),
            ("later", "garden", False, "detection", None),
            ("running", "yard", True, "detection", None),
        ]
        assert ReviewCursor.from_json(cursor).after == done["start_time"]  # held just before the running one
        assert "1 not final yet" in message and "3 review messages stored (3 with no detection)" in message
        sent = tallies(db)

        cursor, message = tick(db, url, cursor)  # nothing changed: nothing sent again
        assert "nothing new" in message and tallies(db) == sent

        running["end_time"] = now - 100  # it ended; Frigate 0.16's GenAI summary came with it
        running["severity"] = "alert"
        running["data"]["metadata"] = {"scene": "A man tries the car doors.", "potential_threat_level": 2}
        cursor, message = tick(db, url, cursor)
        assert "1 review messages stored" in message and tallies(db) == sent + 1
        assert ("running", "yard", False, "alert", 2) in rows(db) and len(rows(db)) == 3  # updated, not a new row
        assert ReviewCursor.from_json(cursor).after == later["start_time"]

        before = rows(db)
        _, message = tick(db, url, None)  # a lost cursor: everything pulled again
    assert "3 review messages stored" in message and rows(db) == before  # same rows, none twice


def test_a_pulled_review_reaches_the_batch_judged_later_and_a_late_one_asks_no_rejudgement(tmp_path: Path) -> None:
    """A real Dagster instance, the real batch_window_sensor and batch and context assets (as in
    test_frigate_rejudgement.py; the verdict is stood in for by an assessment row): the context the LLM would read
    carries the pulled review; one pulled after the verdict is stored but, as over MQTT, runs nothing again."""
    db = tmp_path / "hsi.duckdb"
    start = time.time() - 3600
    event = {
        "id": f"{start:.6f}-p1",
        "camera": "yard",
        "label": "person",
        "start_time": start,
        "end_time": start + 20,
        "zones": ["driveway"],
        "data": {"box": [0.4, 0.3, 0.1, 0.3], "top_score": 0.82, "score": 0.8, "type": "object"},
    }
    load_live_messages(db, [(None, json.dumps(event))], source="api://t", resolutions={}, kind="api_event")
    summary = {"title": "Door tried", "potential_threat_level": 1, "observations": ["pulls the handle"]}
    data = {"detections": [event["id"]], "objects": ["person"], "metadata": summary}
    fake = FakeFrigate([], reviews=[item("rv", start - 5, start + 30, data=data)])
    with serve_frigate(fake) as url:
        cursor, message = tick(db, url, None)
        assert "1 review messages stored (0 with no detection)" in message
        with dg.instance_for_test() as instance:
            res = resources(str(db))
            batches = sensor_tick(batch_window_sensor, instance, res, None)
            [request] = batches.run_requests
            assert materialize_request([detection_batches, enriched_contexts], request, instance, res).success
            with connect(db) as conn:
                context = json.loads(load_context_json(conn, request.partition_key))
                save_assessment(conn, {"batch_id": request.partition_key, "camera_id": "yard", "status": "ok"})
            assert [(r["review_id"], r["threat_level"], r["observations"]) for r in context["reviews"]] == [
                ("rv", 1, ["pulls the handle"])
            ]

            fake.reviews.append(item("late", start - 2, start + 25, severity="alert"))  # after the verdict
            _, message = tick(db, url, cursor)
            assert "1 review messages stored" in message
            assert sensor_tick(batch_window_sensor, instance, res, batches.cursor).run_requests == []
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM batch_rejudgements").fetchone()[0] == 0
        batch, _ = load_batch(conn, request.partition_key)
        covering = reviews_covering(conn, "yard", batch["started_at"], batch["last_ts"])
    assert [r["review_id"] for r in covering] == ["rv", "late"]  # it covers the judged batch: kept, not re-judged


def test_a_review_of_unknown_shape_is_quarantined_once_with_its_reason(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    now = time.time()
    bad_time = item("bad", now - 400, now - 390, start_time="yesterday")
    no_camera = {k: v for k, v in item("nocam", now - 380, now - 370).items() if k != "camera"}
    odd = item("odd", now - 360, now - 350, severity="urgent", data={"objects": "person"})  # kept, parts ignored
    fake = FakeFrigate([], reviews=[bad_time, no_camera, odd])
    fake.answer_reviews = lambda query: [bad_time, no_camera, odd, "garbage"]  # type: ignore[method-assign]
    with serve_frigate(fake) as url:
        cursor, message = tick(db, url, None)
        assert "1 review messages stored" in message and "3 quarantined" in message
        _, message = tick(db, url, cursor)  # remembered: not quarantined again
    assert "nothing new" in message
    with connect(db, read_only=True) as conn:
        reasons = [r[0] for r in conn.execute("SELECT reason FROM quarantine ORDER BY reason").fetchall()]
        ignored = json.loads(conn.execute("SELECT ignored FROM frigate_reviews").fetchone()[0])
    assert len(reasons) == 3
    assert any(r.startswith("camera:") for r in reasons) and any(r.startswith("start_time:") for r in reasons)
    assert any(r.startswith("item:") for r in reasons)
    assert any(i.startswith("severity:") for i in ignored) and any(i.startswith("data.objects:") for i in ignored)


def test_frigate_down_fails_the_tick_naming_the_endpoint_and_keeps_the_cursor(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    now = time.time()
    fake = FakeFrigate([], reviews=[item("r1", now - 600, now - 500)])
    with serve_frigate(fake) as url:
        cursor, _ = tick(db, url, None)
        fake.reviews.append(item("r2", now - 400, now - 300))
        fake.review_status = 503
        with pytest.raises(FrigateApiError, match=r"GET http://127\.0\.0\.1:\d+/api/review: HTTP 503"):
            tick(db, url, cursor)
    with pytest.raises(FrigateApiError, match=r"/api/review: ConnectError"):  # the server is gone
        tick(db, url, cursor)
    assert [r[0] for r in rows(db)] == ["r1"]  # nothing half-stored; the caller's cursor stays as it was
    with serve_frigate(fake) as url:
        fake.review_status = None
        _, message = tick(db, url, cursor)  # back: the item missed while down is read
    assert "1 review messages stored" in message and [r[0] for r in rows(db)] == ["r1", "r2"]
    _, skipped = tick(db, "", None)
    assert skipped == "FRIGATE_URL is not set"
