"""A fast-path batch is judged with what its track has shown so far (core/verdict/track_so_far.py, the floor of
assets/assessments.py), on a real DuckDB file and a real Dagster instance: the sensor records the windows, the real
batches and contexts assets store them, and the floor is read as the LLM step reads it (no model needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg

from hsi_dagster.assets.assessments import batch_floor
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import detection, resources, sensor_tick

PRYING = {"action": {"label": "prying", "score": 0.9}, "florence": {"caption": "a person at the back door"}}


def track_lines(start: datetime, *, acts: bool) -> list[str]:
    """One person's track at `back_door` by day: three unconfident frames (prying when `acts`), then one confident
    frame with nothing on it, which the fast path closes as a batch of its own."""
    lines = [
        detection(
            f"t1-{n}", "back", start + timedelta(seconds=4 * n), "person", 0.6, track_id="t1", zone="back_door",
            enrichment=PRYING if acts else {"florence": {"caption": "a person at the back door"}},
        )
        for n in range(3)
    ]  # fmt: skip
    lines.append(
        detection("t1-fast", "back", start + timedelta(seconds=14), "person", 0.95, track_id="t1", zone="back_door")
    )
    return lines


def fast_path_floor_of(tmp_path, lines: list[str]):
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, lines)
    res = resources(db)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        keys = sorted(request.partition_key for request in tick.run_requests)
        for key in keys:
            assets = [detection_batches, enriched_contexts]
            assert dg.materialize(assets, partition_key=key, instance=instance, resources=res).success
    with connect(db) as conn:
        query = "SELECT batch_id FROM detection_batches WHERE close_reason = 'fast_path'"
        (fast,) = [row[0] for row in conn.execute(query).fetchall()]
        return batch_floor(conn, fast, "back", load_settings("/dev/null"), {})[0]


def test_a_fast_path_frame_is_judged_with_the_prying_its_track_showed_before_it(tmp_path):
    day = datetime.now(UTC).replace(hour=13, minute=0, second=0, microsecond=0) - timedelta(days=1)
    floor = fast_path_floor_of(tmp_path, track_lines(day, acts=True))
    # alone the confident frame shows a person at a door by day (nothing); its track was prying at that door
    assert floor.level == "critical" and floor.score == 90
    assert floor.reasons[0].startswith("track so far (3 earlier detections since 13:00:00 UTC): forcing")
    assert "'back_door'" in floor.reasons[0]


def test_a_track_that_showed_nothing_more_leaves_the_fast_path_floor_as_it_was(tmp_path):
    day = datetime.now(UTC).replace(hour=13, minute=0, second=0, microsecond=0) - timedelta(days=1)
    floor = fast_path_floor_of(tmp_path, track_lines(day, acts=False))
    assert (floor.score, floor.reasons) == (0, ())
