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
