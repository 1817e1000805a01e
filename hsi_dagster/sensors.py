"""Sensors: closed batch windows -> runs; inbox files -> ingest runs; risky assessments -> alerts."""

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from hsi_dagster.assets.ingest import IngestConfig
from hsi_dagster.core.batch_policy import BatchHistory, PastRun, WindowCursor, history_from_runs, plan_tick
from hsi_dagster.core.batching import BatchRules
from hsi_dagster.core.frigate import ApiCursor, plan_api_pull
from hsi_dagster.jobs import batch_pipeline_job, ingest_job
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.storage.alerts import risk_alert_for, unassessed_fast_path_alert
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.db import DatabaseNotFound
from hsi_dagster.storage.frigate import load_live_messages
from hsi_dagster.storage.pipeline_tables import unassessed_batches

RISK_ASSESSMENTS_KEY = dg.AssetKey("risk_assessments")
INBOX_PATTERNS = ("*.jsonl", "*.jsonl.gz")
PARTITION_TAG = "dagster/partition"
HISTORY_QUERY_KEYS = 500  # partition keys per run-storage query


def batch_run_history(instance: dg.DagsterInstance, batch_ids: Sequence[str]) -> dict[str, BatchHistory]:
    """Attempts per batch from the instance's runs of its partition, whoever launched them (this sensor,
    `hsi process`, the UI): the history that the batch policy (core/batch_policy.py) is applied to."""
    runs = []
    for start in range(0, len(batch_ids), HISTORY_QUERY_KEYS):
        keys = list(batch_ids[start : start + HISTORY_QUERY_KEYS])
        for record in instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: keys})):
            run = record.dagster_run
            ended = (record.end_time or record.update_timestamp.timestamp()) if run.is_finished else None
            succeeded = run.status == dg.DagsterRunStatus.SUCCESS
            runs.append(PastRun(run.tags[PARTITION_TAG], record.create_timestamp.timestamp(), ended, succeeded))
    return history_from_runs(runs)


@dg.sensor(job=batch_pipeline_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def batch_window_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Each closed window once (run_key = batch_id), failed ones again after a back-off, given up after
    MAX_ATTEMPTS (core/batch_policy.py, the rules `hsi process` follows too); read-only and capped."""
    settings = pipeline_settings.get()
    try:
        with duckdb.get_connection(read_only=True) as conn:
            closed = pending_closed_batches(conn, BatchRules.from_settings(settings), datetime.now(UTC))
            unassessed = unassessed_batches(conn)
    except DatabaseNotFound as exc:
        return dg.SkipReason(str(exc))
    cameras = {batch.batch_id: batch.camera_id for batch in closed}
    closed_ids = [batch.batch_id for batch in closed]
    plan = plan_tick(
        WindowCursor.from_json(context.cursor),
        closed_ids,
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
            run_key=request.run_key,
            partition_key=request.batch_id,
            tags={"hsi/attempt": str(request.attempt), "hsi/camera": cameras.get(request.batch_id, "")},
        )
        for request in plan.requests
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[batch_partitions.build_add_request(plan.new_partitions)]
        if plan.new_partitions
        else [],
        cursor=plan.cursor.to_json(),
    )


@dg.sensor(job=ingest_job, minimum_interval_seconds=10, default_status=dg.DefaultSensorStatus.RUNNING)
def inbox_sensor(
    context: dg.SensorEvaluationContext, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Each file dropped in HSI_INBOX_DIR is ingested once, also after a restart (cursor, run_key and the
    `ingested_files` table all key on path, size and modification time)."""
    inbox = Path(pipeline_settings.get().HSI_INBOX_DIR)
    if not inbox.is_dir():
        return dg.SkipReason(f"no inbox folder at {inbox}")
    seen: dict[str, str] = dg.deserialize_value(context.cursor, dict) if context.cursor else {}
    current: dict[str, str] = {}
    requests = []
    for pattern in INBOX_PATTERNS:
        for path in sorted(inbox.glob(pattern)):
            if path.name.startswith("."):
                continue  # still being written (writers rename when done)
            stat = path.stat()
            version = f"{stat.st_size}:{stat.st_mtime_ns}"
            current[str(path)] = version
            if seen.get(str(path)) != version:
                requests.append(
                    dg.RunRequest(
                        run_key=f"{path.name}:{version}",
                        run_config=dg.RunConfig(ops={"detections": IngestConfig(paths=[str(path.resolve())])}),
                    )
                )
    return dg.SensorResult(run_requests=requests, cursor=dg.serialize_value(current))


@dg.sensor(minimum_interval_seconds=15, default_status=dg.DefaultSensorStatus.RUNNING)
def high_risk_alert_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, alert_webhook: AlertWebhookResource
) -> dg.SkipReason:
    """For each new risk_assessments materialization: an alert row (and webhook post) when high or critical."""
    records = context.instance.fetch_materializations(
        RISK_ASSESSMENTS_KEY, limit=200, cursor=context.cursor, ascending=True
    )
    raised = 0
    if records.records:
        with duckdb.get_connection() as conn:
            for record in records.records:
                alert = risk_alert_for(conn, record.partition_key) if record.partition_key else None
                if alert and alert_webhook.raise_alert(conn, alert) is not None:
                    raised += 1
    context.update_cursor(records.cursor)
    return dg.SkipReason(f"{len(records.records)} assessments read, {raised} alerts raised")


@dg.run_failure_sensor(monitored_jobs=[batch_pipeline_job], default_status=dg.DefaultSensorStatus.RUNNING)
def unassessed_fast_path_sensor(
    context: dg.RunFailureSensorContext, duckdb: HsiDuckDBResource, alert_webhook: AlertWebhookResource
) -> None:
    """A confident person that the LLM could not assess still alerts (without LLM text)."""
    batch_id = context.dagster_run.tags.get("dagster/partition")
    if not batch_id:
        return
    with duckdb.get_connection() as conn:
        alert = unassessed_fast_path_alert(conn, batch_id)
        if alert:
            alert_webhook.raise_alert(conn, alert)


# ------------------------------------------------------------------------------------------------ Frigate pull
FRIGATE_MAX_EVENTS_PER_TICK = 1000
FRIGATE_MAX_HOLD_SECONDS = 3600.0  # an event still in progress after this long is pulled as it is


def _frigate_default_status() -> dg.DefaultSensorStatus:
    """On by default only when FRIGATE_URL is set where the code location loads (turn it on in the UI otherwise)."""
    from hsi_dagster.settings import load_settings

    try:
        configured = bool(load_settings().FRIGATE_URL)
    except Exception:  # a bad .env is reported by the definitions themselves
        configured = False
    return dg.DefaultSensorStatus.RUNNING if configured else dg.DefaultSensorStatus.STOPPED


@dg.sensor(minimum_interval_seconds=30, default_status=_frigate_default_status())
def frigate_events_sensor(
    context: dg.SensorEvaluationContext, frigate: FrigateResource, duckdb: HsiDuckDBResource
) -> dg.SkipReason:
    """Frigate's /api/events after the cursor -> detections (contract section 5), each event once, after it ended
    (core.frigate.plan_api_pull); a failed write leaves the cursor where it was, so the next tick retries."""
    if not frigate.url.strip():
        return dg.SkipReason("FRIGATE_URL is not set")
    cursor = ApiCursor.from_json(context.cursor)
    events = frigate.events_after(cursor.after, max_items=FRIGATE_MAX_EVENTS_PER_TICK)
    plan = plan_api_pull(
        events,
        cursor,
        now=time.time(),
        settle_seconds=frigate.settle_seconds,
        max_hold_seconds=FRIGATE_MAX_HOLD_SECONDS,
    )
    summary = "nothing new"
    if plan.ready:
        report = load_live_messages(
            duckdb.database,
            [(None, json.dumps(event)) for event in plan.ready],
            source=f"{frigate.base_url}/api/events",
            resolutions={},  # an API event's box is relative to its frame already
            kind="api_event",
        )
        summary = report.summary()
    context.update_cursor(plan.cursor.to_json())
    return dg.SkipReason(f"{len(events)} events read, {plan.waiting} still in progress; {summary}")
