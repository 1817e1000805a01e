"""Sensors: inbox files -> detections (loaded in the tick) and closed batch windows -> runs; risky assessments ->
alerts."""

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from duckdb import DuckDBPyConnection

from hsi_dagster.assets.ingest import IngestConfig
from hsi_dagster.core.batch_policy import BatchHistory, PastRun, WindowCursor, history_from_runs, plan_tick
from hsi_dagster.core.batching import BatchRules
from hsi_dagster.core.frigate import ApiCursor, plan_api_pull
from hsi_dagster.jobs import batch_pipeline_job, ingest_job
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.alerts import risk_alert_for, unassessed_fast_path_alert
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.db import DatabaseNotFound
from hsi_dagster.storage.frigate import load_live_messages
from hsi_dagster.storage.ingest import FileReport, IngestError, ingest_files
from hsi_dagster.storage.pipeline_tables import unassessed_batches

RISK_ASSESSMENTS_KEY = dg.AssetKey("risk_assessments")
DETECTIONS_KEY = dg.AssetKey("detections")
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


def _plan_windows(
    context: dg.SensorEvaluationContext,
    conn: DuckDBPyConnection,
    settings: HsiSettings,
    window_cursor: str | None,
    as_of: datetime,
) -> tuple[list[dg.RunRequest], list[str], WindowCursor]:
    """Each closed window once (run_key = batch_id), failed ones again after a back-off, given up after
    MAX_ATTEMPTS (core/batch_policy.py, the rules `hsi process` follows too); capped per tick. Returns the run
    requests, the partitions to add and the next cursor."""
    closed = pending_closed_batches(conn, BatchRules.from_settings(settings), as_of)
    unassessed = unassessed_batches(conn)
    cameras = {batch.batch_id: batch.camera_id for batch in closed}
    plan = plan_tick(
        WindowCursor.from_json(window_cursor),
        [batch.batch_id for batch in closed],
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
    return requests, list(plan.new_partitions), plan.cursor


def _partition_requests(new_partitions: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
    return [batch_partitions.build_add_request(new_partitions)] if new_partitions else []


@dg.sensor(job=batch_pipeline_job, minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING)
def batch_window_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Closed windows -> runs, for detections that do not come through the inbox (`hsi ingest`, Frigate).
    Read-only. When the inbox folder exists, `inbox_sensor` plans the windows instead, right after each ingest,
    so that a window is never decided while its detections still wait in the inbox (two planners would also
    race for the same window)."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    if inbox.is_dir():
        return dg.SkipReason(f"windows are planned by inbox_sensor after each ingest (inbox folder {inbox} exists)")
    try:
        with duckdb.get_connection(read_only=True) as conn:
            requests, new_partitions, cursor = _plan_windows(context, conn, settings, context.cursor, datetime.now(UTC))
    except DatabaseNotFound as exc:
        return dg.SkipReason(str(exc))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=_partition_requests(new_partitions),
        cursor=cursor.to_json(),
    )


# ------------------------------------------------------------------------------------------------ the inbox
INBOX_MAX_FILES_PER_TICK = 500
INBOX_MAX_BYTES_PER_TICK = 32 * 2**20  # a larger file is ingested by a run of ingest_job instead
INBOX_MAX_SECONDS_PER_TICK = 20.0  # well under the daemon's 60 s sensor timeout
INBOX_WRITE_DELAY_SECONDS = 1.0  # a file's detections may be this much older than the file (one-second files)


@dataclass(frozen=True)
class InboxFile:
    path: Path
    size: int
    mtime_ns: int

    @property
    def version(self) -> str:
        return f"{self.size}:{self.mtime_ns}"


def inbox_files(inbox: Path) -> list[InboxFile]:
    """Finished files in the inbox, oldest first (writers rename a `.`-prefixed file when done)."""
    found = []
    for pattern in INBOX_PATTERNS:
        for path in inbox.glob(pattern):
            if path.name.startswith("."):
                continue
            try:
                stat = path.stat()
            except OSError:
                continue  # renamed or deleted since the listing
            found.append(InboxFile(path, stat.st_size, stat.st_mtime_ns))
    return sorted(found, key=lambda f: (f.mtime_ns, f.path.name))


@dataclass
class InboxCursor:
    """Files handled (path -> "size:mtime_ns"; ingested here or handed to an ingest run) and the window planner's
    cursor. Only a hint: `ingested_files` in DuckDB is what keeps a file from being loaded twice."""

    files: dict[str, str] = field(default_factory=dict)
    windows: str | None = None

    @classmethod
    def from_json(cls, text: str | None) -> "InboxCursor":
        if not text:
            return cls()
        data = json.loads(text)
        if "files" not in data or not isinstance(data.get("files"), dict):  # before #17: path -> version only
            return cls(files={k: v for k, v in data.items() if isinstance(v, str)})
        return cls(files=dict(data["files"]), windows=data.get("windows"))

    def to_json(self) -> str:
        return json.dumps({"files": self.files, "windows": self.windows}, sort_keys=True, separators=(",", ":"))


@dg.sensor(
    jobs=[ingest_job, batch_pipeline_job], minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING
)
def inbox_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Files dropped in HSI_INBOX_DIR are loaded here, in the tick (a run per file cost seconds each and queued
    behind one another), and reported as `detections` materializations; then the windows closed by then are
    planned and their runs requested in the same tick. Bounded per tick (files, bytes, seconds); a file over the
    byte bound goes to a run of ingest_job. Each file is loaded once, also after a restart or a tick that died
    midway: `ingested_files` keys on path, size and modification time, and re-loading a file is a no-op."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    if not inbox.is_dir():
        return dg.SkipReason(f"no inbox folder at {inbox}")
    started = time.time()
    cursor = InboxCursor.from_json(context.cursor)
    listed = inbox_files(inbox)
    handled = {str(f.path): f.version for f in listed if cursor.files.get(str(f.path)) == f.version}
    new = [f for f in listed if str(f.path) not in handled]
    run_requests: list[dg.RunRequest] = []
    events: list[dg.AssetMaterialization] = []
    pending: list[InboxFile] = []  # left for the next tick
    reports: list[FileReport] = []
    failed: dict[str, str] = {}
    budget = INBOX_MAX_BYTES_PER_TICK
    to_load: list[InboxFile] = []
    for f in new:
        if f.size > INBOX_MAX_BYTES_PER_TICK:
            run_requests.append(
                dg.RunRequest(
                    job_name=ingest_job.name,
                    run_key=f"{f.path.name}:{f.version}",
                    run_config=dg.RunConfig(ops={"detections": IngestConfig(paths=[str(f.path.resolve())])}),
                )
            )
            handled[str(f.path)] = f.version
        elif len(to_load) < INBOX_MAX_FILES_PER_TICK and f.size <= budget and not pending:
            to_load.append(f)
            budget -= f.size
        else:
            pending.append(f)
    # If the tick dies here, files loaded so far stay loaded and are skipped next time; the cursor is not advanced.
    if to_load:
        with duckdb.get_connection() as conn:
            for index, f in enumerate(to_load):
                if time.time() - started > INBOX_MAX_SECONDS_PER_TICK:
                    pending[:0] = to_load[index:]
                    break
                try:
                    report = ingest_files(conn, [f.path], settings=settings, skip_already_ingested=True)
                except IngestError as exc:  # unreadable or corrupt: named in the log, not retried until it changes
                    context.log.error(str(exc))
                    failed[str(f.path)] = str(exc)
                else:
                    reports += report.files
                handled[str(f.path)] = f.version
    if reports or failed:
        events.append(
            dg.AssetMaterialization(
                asset_key=DETECTIONS_KEY,
                description=f"{len(reports)} inbox files loaded by inbox_sensor",
                metadata={
                    "files": dg.MetadataValue.json([r.source for r in reports]),
                    "loaded": sum(r.loaded for r in reports),
                    "duplicates_skipped": sum(r.duplicates for r in reports),
                    "quarantined": sum(r.quarantined for r in reports),
                    "already_ingested": sum(r.skipped for r in reports),
                    "failed": dg.MetadataValue.json(failed),
                    "elapsed_s": round(time.time() - started, 3),
                },
            )
        )
    # Windows are decided only up to the oldest file still waiting (all older files are loaded by now).
    as_of = min([started] + [f.mtime_ns / 1e9 for f in pending]) - INBOX_WRITE_DELAY_SECONDS
    if pending:
        context.log.info(f"{len(pending)} inbox files left for the next tick (bounds per tick)")
    try:
        with duckdb.get_connection(read_only=True) as conn:
            batch_requests, new_partitions, windows = _plan_windows(
                context, conn, settings, cursor.windows, datetime.fromtimestamp(as_of, UTC)
            )
        window_cursor: str | None = windows.to_json()
    except DatabaseNotFound:
        batch_requests, new_partitions, window_cursor = [], [], cursor.windows
    return dg.SensorResult(
        run_requests=run_requests + batch_requests,
        asset_events=events,
        dynamic_partitions_requests=_partition_requests(new_partitions),
        cursor=InboxCursor(handled, window_cursor).to_json(),
    )


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
    context: dg.SensorEvaluationContext,
    frigate: FrigateResource,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
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
            bounds=pipeline_settings.get().ingest_bounds,
        )
        summary = report.summary()
    context.update_cursor(plan.cursor.to_json())
    return dg.SkipReason(f"{len(events)} events read, {plan.waiting} still in progress; {summary}")
