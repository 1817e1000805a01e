"""History in the Dagster layer, on real DuckDB files and real instances: a batch's enriched context carries the
baseline and cross-camera facts (metadata, stored JSON, the prompt's two sections), `camera_baselines` re-derives the
aggregate and shows the usual hours, the retention job prunes it, and the batch job does not wait for the asset."""

from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb

from hsi_dagster.assets.baselines import camera_baselines
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.jobs import batch_pipeline_job, partition_retention_job
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import detection, resources, sensor_tick

PROFILES = """cameras:
  back_door: {timezone: UTC, entry_point: true, approached_from: [driveway]}
  driveway: {timezone: UTC, approached_from: [street]}
  street: {}
"""


def history_lines(now: datetime) -> tuple[list[str], datetime]:
    """14 days of a car on the driveway at the batch's hour and nobody at the back door at that hour (a cat at noon),
    then street -> driveway -> back_door in the last minutes."""
    batch_start = (now - timedelta(hours=2)).replace(second=0, microsecond=0)
    lines = []
    for ago in range(1, 15):
        day = batch_start - timedelta(days=ago)
        lines.append(detection(f"bd-{ago}", "back_door", day.replace(hour=12, minute=0), "cat", 0.8))
        lines.append(detection(f"dw-{ago}", "driveway", day, "car", 0.8))
    lines.append(detection("st-now", "street", batch_start - timedelta(minutes=6), "person", 0.9))
    lines.append(detection("dw-now", "driveway", batch_start - timedelta(minutes=3), "person", 0.9))
    lines.append(detection("bd-now-a", "back_door", batch_start, "person", 0.92))
    lines.append(detection("bd-now-b", "back_door", batch_start + timedelta(seconds=5), "person", 0.93))
    return lines, batch_start


def test_a_batch_is_compared_with_the_history_and_shows_it(tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text(PROFILES)
    lines, _ = history_lines(datetime.now(UTC))
    ingest_lines(db, lines)
    res = resources(db, CAMERA_CONTEXT_PATH=str(profiles))
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        keys = [r.partition_key for r in tick.run_requests if r.partition_key.startswith("back_door")]
        batch_id = max(keys)  # the last back_door window: the two persons
        result = dg.materialize(
            [detection_batches, enriched_contexts, budgeted_prompts],
            partition_key=batch_id,
            instance=instance,
            resources=res,
        )
        assert result.success
        metadata = {
            e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
        context_meta = metadata["enriched_contexts"]
        assert "person 0/14 days (unusual)" in context_meta["history_baseline"].value
        assert context_meta["history_path_to_entry"].value == "street -> driveway -> back_door"
        assert context_meta["history_assumptions"].value == "none"
    with duckdb.connect(db, read_only=True) as conn:
        stored = EnrichedContext.from_json(
            conn.execute("SELECT context FROM enriched_contexts WHERE batch_id = ?", [batch_id]).fetchone()[0]
        )
        user = conn.execute("SELECT messages FROM budgeted_prompts WHERE batch_id = ?", [batch_id]).fetchone()[0]
    assert stored.history is not None and stored.history.unusual_labels == ("person",)
    assert "## Usual activity at this hour" in user and "## Other cameras just before" in user
    assert '\\"street\\" -> \\"driveway\\" -> \\"back_door\\"' in user


def test_camera_baselines_rederives_the_aggregate_and_retention_prunes_it(tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text(PROFILES)
    lines, _ = history_lines(datetime.now(UTC))
    old = datetime.now(UTC) - timedelta(days=40)
    ingest_lines(db, [*lines, detection("ancient", "street", old, "person", 0.9)])
    with connect(db) as conn:  # drift: a count gone wrong (by hand, or an older version)
        conn.execute("UPDATE camera_activity SET detections = 99 WHERE camera_id = 'driveway' AND label = 'car'")
    res = resources(db, CAMERA_CONTEXT_PATH=str(profiles))
    with dg.instance_for_test() as instance:
        result = dg.materialize([camera_baselines], instance=instance, resources=res)
        assert result.success
        meta = result.get_asset_materialization_events()[0].step_materialization_data.materialization.metadata
        assert meta["buckets_corrected"].value == 14
        table = meta["baselines"].value
        assert "| driveway | UTC | 14 of 14 |" in table and "car:" in table
        assert "| street | UTC (assumed) |" in table
        retention = partition_retention_job.execute_in_process(instance=instance, resources=res)
        assert retention.success and retention.output_for_node("prune_camera_activity") == 1  # the 40-day-old one
    with duckdb.connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM camera_activity WHERE detections = 99").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM detections WHERE detection_id = 'ancient'").fetchone()[0] == 1


def test_the_batch_job_does_not_wait_for_camera_baselines():
    from hsi_dagster.definitions import defs

    job = defs.resolve_job_def(batch_pipeline_job.name)
    nodes = {node.name for node in job.nodes_in_topological_order}
    assert "enriched_contexts" in nodes and "camera_baselines" not in nodes
    deps = {dep.asset_key.to_user_string() for dep in enriched_contexts.specs_by_key[enriched_contexts.key].deps}
    assert "camera_baselines" in deps
