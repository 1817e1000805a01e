"""The retention job deletes old batch partitions from Dagster only: DuckDB rows stay."""

from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb

from hsi_dagster.jobs import partition_retention_job
from hsi_dagster.storage.db import connect
from tests.support.pipeline_helpers import resources


def test_old_partitions_go_rows_stay(tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    now = datetime.now(UTC)
    ages = {"old-a": 8, "old-b": 30, "new-c": 1}
    with connect(db) as conn:
        for batch_id, days in ages.items():
            t = now - timedelta(days=days)
            conn.execute(
                "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
                " detection_count, detection_ids, recorded_at) VALUES (?, 'cam', ?, ?, ?, 'idle', 1, ['d'], ?)",
                [batch_id, t, t, t + timedelta(seconds=30), now],
            )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batches", [*ages, "never-recorded"])
        res = resources(db, PARTITION_RETENTION_DAYS="7")
        result = partition_retention_job.execute_in_process(instance=instance, resources=res)
        assert result.success and result.output_for_node("prune_batch_partitions") == 2
        assert sorted(instance.get_dynamic_partitions("batches")) == ["never-recorded", "new-c"]
    with duckdb.connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM detection_batches").fetchone()[0] == 3


def test_a_corrected_batch_keeps_its_partition_context_and_prompt(tmp_path):
    """The household's label is replayed from the batch's stored context and prompt: retention never prunes it."""
    from hsi_dagster.core.outbound.corrections import check_request
    from hsi_dagster.storage.corrections import correct
    from hsi_dagster.storage.pipeline_tables import save_context, save_prompt
    from tests.support.verdicts import save_verdict

    db = str(tmp_path / "hsi.duckdb")
    now = datetime.now(UTC)
    with connect(db) as conn:
        for batch_id in ("old-corrected", "old-plain"):
            t = now - timedelta(days=30)
            conn.execute(
                "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
                " detection_count, detection_ids, recorded_at) VALUES (?, 'cam', ?, ?, ?, 'idle', 1, ['d'], ?)",
                [batch_id, t, t, t + timedelta(seconds=30), now],
            )
    for batch_id in ("old-corrected", "old-plain"):
        save_verdict(tmp_path / "hsi.duckdb", batch_id, "cam", 45, now - timedelta(days=30))
    with connect(db) as conn:
        save_context(conn, "old-corrected", '{"camera_id": "cam"}', "full", [])
        save_prompt(
            conn,
            "old-corrected",
            messages=[{"role": "user", "content": "x"}],
            tokens_estimate=10,
            tokens_before=10,
            budget=100,
            budget_source="test",
            utilization=0.1,
            sections_removed=[],
            static_prefix_sha256="0" * 64,
        )
        correct(conn, check_request("old-corrected", "low", source="cli"), now)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batches", ["old-corrected", "old-plain"])
        res = resources(db, PARTITION_RETENTION_DAYS="7")
        result = partition_retention_job.execute_in_process(instance=instance, resources=res)
        assert result.success and result.output_for_node("prune_batch_partitions") == 1
        assert instance.get_dynamic_partitions("batches") == ["old-corrected"]
    with duckdb.connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM enriched_contexts WHERE batch_id = 'old-corrected'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM budgeted_prompts WHERE batch_id = 'old-corrected'").fetchone()[0]


def test_visits_are_pruned_with_their_batches_and_a_corrected_batch_keeps_its_visit(tmp_path):
    """The retention job drops the visit links of the batches it prunes (and an old evidence-only alert's link once
    its visit holds no batch), the visits left with none, never a corrected batch's link or a recent visit."""
    from hsi_dagster.core.outbound.corrections import check_request
    from hsi_dagster.core.visits.linking import VisitRules
    from hsi_dagster.storage.corrections import correct
    from hsi_dagster.storage.visits import link_batch
    from tests.core.visits.helpers import sighting
    from tests.support.verdicts import save_verdict

    db = str(tmp_path / "hsi.duckdb")
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=30), now - timedelta(days=1)
    looks = {  # batch -> (camera, start); one visit per group: old-a+old-b, corrected+old-d, new-e
        "old-a": ("front_door", old),
        "old-b": ("driveway", old + timedelta(minutes=2)),
        "old-corrected": ("front_door", old + timedelta(hours=3)),
        "old-d": ("garden", old + timedelta(hours=3, minutes=1)),
        "new-e": ("front_door", recent),
    }
    with connect(db) as conn:
        for batch_id, (camera, t) in looks.items():
            conn.execute(
                "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
                " detection_count, detection_ids, recorded_at) VALUES (?, ?, ?, ?, ?, 'idle', 1, ['d'], ?)",
                [batch_id, camera, t, t, t + timedelta(seconds=30), now],
            )
            link_batch(conn, sighting(camera, t, batch_id=batch_id), VisitRules(), t)
        alert = sighting("driveway", old + timedelta(minutes=2), batch_id="evidence:driveway:t1:1", seconds=5)
        link_batch(conn, alert, VisitRules(), old)
    save_verdict(tmp_path / "hsi.duckdb", "old-corrected", "front_door", 45, old)
    with connect(db) as conn:
        correct(conn, check_request("old-corrected", "low", source="cli"), now)
        before = conn.execute("SELECT visit_id FROM visits ORDER BY first_ts").fetchall()
    assert len(before) == 3
    res = resources(db, PARTITION_RETENTION_DAYS="7")
    with dg.instance_for_test() as instance:
        result = partition_retention_job.execute_in_process(instance=instance, resources=res)
        assert result.success and result.output_for_node("prune_visits") == 1
        again = partition_retention_job.execute_in_process(instance=instance, resources=res)
        assert again.success and again.output_for_node("prune_visits") == 0
    with duckdb.connect(db, read_only=True) as conn:
        visits = conn.execute("SELECT visit_id, batch_count FROM visits ORDER BY first_ts").fetchall()
        links = conn.execute("SELECT batch_id, visit_id FROM visit_batches ORDER BY batch_id").fetchall()
    assert visits == [("visit:old-corrected", 2), ("visit:new-e", 1)]  # the corrected batch's visit stays whole
    assert links == [("new-e", "visit:new-e"), ("old-corrected", "visit:old-corrected")]
