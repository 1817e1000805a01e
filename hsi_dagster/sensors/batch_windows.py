"""batch_window_sensor: closed windows -> batch runs, for detections that do not come through the inbox."""

import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from hsi_dagster.jobs import batch_pipeline_job
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.sensors.hold import keep_holding, next_due, wait_for_change
from hsi_dagster.sensors.window_planning import partition_requests, plan_windows
from hsi_dagster.storage.db import DatabaseNotFound, written_files


@dg.sensor(job=batch_pipeline_job, minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING)
def batch_window_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Closed windows -> runs, for detections that do not come through the inbox (`hsi ingest`, Frigate).
    Read-only. When the inbox folder exists, `inbox_sensor` plans the windows instead, right after each ingest,
    so that a window is never decided while its detections still wait in the inbox (two planners would also
    race for the same window). The tick holds on (SENSOR_HOLD_SECONDS), planning again after each database
    write and at each window's close, and ends as soon as it has runs to request."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    if inbox.is_dir():
        return dg.SkipReason(f"windows are planned by inbox_sensor after each ingest (inbox folder {inbox} exists)")
    hold_until = time.time() + settings.SENSOR_HOLD_SECONDS
    try:
        while True:
            with duckdb.get_connection(read_only=True) as conn:
                plan = plan_windows(context, conn, settings, context.cursor, datetime.now(UTC))
            due = next_due(plan, 0.0)
            if not keep_holding(bool(plan.requests), due, hold_until):
                break
            if not wait_for_change(due, hold_until, written_files(duckdb.database)):
                break
    except DatabaseNotFound as exc:
        return dg.SkipReason(str(exc))
    return dg.SensorResult(
        run_requests=plan.requests,
        dynamic_partitions_requests=partition_requests(plan.new_partitions),
        cursor=plan.cursor.to_json(),
    )
