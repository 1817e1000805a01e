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
