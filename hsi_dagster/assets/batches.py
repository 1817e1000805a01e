"""`detection_batches`: one partition per closed batch window, recorded with its detections."""

from datetime import UTC, datetime

import dagster as dg

from hsi_dagster.assets.ingest import detections
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.storage.batches import record_batch


@dg.asset(
    partitions_def=batch_partitions,
    deps=[detections],
    group_name="pipeline",
    kinds={"duckdb"},
)
def detection_batches(
    context: dg.AssetExecutionContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.MaterializeResult:
    """A camera's detections grouped into one closed window (contract section 2); assigns them to the batch."""
    rules = BatchRules.from_settings(pipeline_settings.get())
    with duckdb.get_connection() as conn:
        batch = record_batch(conn, context.partition_key, rules, datetime.now(UTC))
    return dg.MaterializeResult(
        metadata={
            "camera_id": batch.camera_id,
            "detection_count": len(batch.detection_ids),
            "labels": ", ".join(sorted(set(batch.labels))),
            "started_at": batch.started_at.isoformat(),
            "closes_at": batch.closes_at.isoformat(),
            "window_s": round((batch.last_ts - batch.started_at).total_seconds(), 3),
            "close_reason": batch.close_reason,
        }
    )
