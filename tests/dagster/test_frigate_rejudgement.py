"""A late Frigate description re-judges its batch (issue 40 item 6): a real Dagster instance, the real
batch_window_sensor and the real batch and context assets on a real DuckDB file; the verdict step (the LLM) is
stood in for by storing an assessment row, as its asset does."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import load_live_messages
from hsi_dagster.storage.pipeline_tables import load_context_json, save_assessment
from tests.support.pipeline_helpers import materialize_request, resources, sensor_tick

T = time.time() - 3600
TRACK = f"{T:.6f}-p1"
RES = {"front_door": (1280, 720)}


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def person(**changes: Any) -> dict[str, Any]:
    after = {
        "id": TRACK,
        "camera": "front_door",
        "frame_time": T,
        "label": "person",
        "top_score": 0.8,
        "score": 0.8,
        "false_positive": False,
        "start_time": T,
        "box": [600, 200, 760, 700],
        "current_zones": ["walkway", "front_door"],
        "entered_zones": ["walkway", "front_door"],
        "stationary": False,
    }
    return {**after, **changes}


def test_a_description_after_the_verdict_makes_the_sensor_run_the_batch_again(instance, tmp_path: Path) -> None:
    db = str(tmp_path / "hsi.duckdb")
    first = person()
    events = [{"type": "new", "before": {**first, "false_positive": True}, "after": first}]
    load_live_messages(db, [("frigate/events", json.dumps(e)) for e in events], source="mqtt://t", resolutions=RES)
    res = resources(db)
    tick = sensor_tick(batch_window_sensor, instance, res, None)
    [request] = tick.run_requests
    assert materialize_request([detection_batches, enriched_contexts], request, instance, res).success
    with connect(db) as conn:
        save_assessment(conn, {"batch_id": request.partition_key, "camera_id": "front_door", "status": "ok"})
    tick = sensor_tick(batch_window_sensor, instance, res, tick.cursor)
    assert tick.run_requests == []  # judged: nothing to do

    text = "A man prying the front door open with a crowbar."
    description = {"type": "description", "id": TRACK, "description": text}
    report = load_live_messages(
        db, [("frigate/tracked_object_update", json.dumps(description))], source="mqtt://t", resolutions=RES
    )
    assert (report.joined, report.rejudged) == (1, 1)
    tick = sensor_tick(batch_window_sensor, instance, res, tick.cursor)
    assert [(r.partition_key, r.run_key, r.tags["hsi/attempt"]) for r in tick.run_requests] == [
        (request.partition_key, f"{request.partition_key}#retry1", "1")
    ]
    [again] = tick.run_requests
    assert materialize_request([detection_batches, enriched_contexts], again, instance, res).success
    with connect(db) as conn:
        context = json.loads(load_context_json(conn, request.partition_key))
        assert context["detections"]["count"] == 2 and text in json.dumps(context["florence"])
        assert context["detections"]["tracks"][0]["zones"] == ["walkway", "front_door"]
        save_assessment(conn, {"batch_id": request.partition_key, "camera_id": "front_door", "status": "ok"})
    assert sensor_tick(batch_window_sensor, instance, res, tick.cursor).run_requests == []
