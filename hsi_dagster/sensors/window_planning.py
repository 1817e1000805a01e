"""Window planning shared by the sensors that request batch runs (batch_window_sensor, inbox_sensor): which closed
windows get a run this tick (core/intake/batch_policy.py), as Dagster run and partition requests."""

import time
from dataclasses import dataclass
from datetime import datetime

import dagster as dg
from duckdb import DuckDBPyConnection

from hsi_dagster.core.intake.batch_policy import WindowCursor, plan_tick
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.instance.run_history import batch_run_history
from hsi_dagster.jobs import batch_pipeline_job
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.batches import pending_windows
from hsi_dagster.storage.pipeline_tables import unassessed_batches


@dataclass(frozen=True)
class WindowPlan:
    requests: list[dg.RunRequest]
    new_partitions: list[str]
    cursor: WindowCursor
    next_change: float | None  # epoch seconds: the earliest later time the plan may differ (PendingWindows)


def plan_windows(
    context: dg.SensorEvaluationContext,
    conn: DuckDBPyConnection,
    settings: HsiSettings,
    window_cursor: str | None,
    as_of: datetime,
) -> WindowPlan:
    """Each closed window once (run_key = batch_id), failed ones again after a back-off, given up after
    MAX_ATTEMPTS (core/intake/batch_policy.py, the rules `hsi process` follows too); capped per tick."""
    windows = pending_windows(conn, BatchRules.from_settings(settings), as_of)
    unassessed = unassessed_batches(conn)
    cameras = {batch.batch_id: batch.camera_id for batch in windows.closed}
    plan = plan_tick(
        WindowCursor.from_json(window_cursor),
        [batch.batch_id for batch in windows.closed],
        unassessed,
        time.time(),
        cap=settings.SENSOR_MAX_BATCHES_PER_TICK,
        runs=lambda batch_ids: batch_run_history(context.instance, batch_ids),
    )
    for batch_id in plan.abandoned:
        context.log.error(f"batch {batch_id}: no assessment after repeated runs; giving up (see the failed runs)")
    if plan.deferred:
        context.log.info(
            f"{plan.deferred} closed batches left for the next tick (cap {settings.SENSOR_MAX_BATCHES_PER_TICK})"
        )
    requests = [
        dg.RunRequest(
            job_name=batch_pipeline_job.name,
            run_key=request.run_key,
            partition_key=request.batch_id,
            tags={"hsi/attempt": str(request.attempt), "hsi/camera": cameras.get(request.batch_id, "")},
        )
        for request in plan.requests
    ]
    next_change = windows.next_change.timestamp() if windows.next_change else None
    return WindowPlan(requests, list(plan.new_partitions), plan.cursor, next_change)


def partition_requests(new_partitions: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
    return [batch_partitions.build_add_request(new_partitions)] if new_partitions else []
