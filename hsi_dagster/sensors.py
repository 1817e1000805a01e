"""Sensors: inbox files -> detections (loaded in the tick) and closed batch windows -> runs; risky assessments ->
alerts."""

import json
import os
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
from hsi_dagster.storage.batches import pending_windows
from hsi_dagster.storage.db import DatabaseNotFound, written_files
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


@dataclass(frozen=True)
class WindowPlan:
    requests: list[dg.RunRequest]
    new_partitions: list[str]
    cursor: WindowCursor
    next_change: float | None  # epoch seconds: the earliest later time the plan may differ (PendingWindows)


def _plan_windows(
    context: dg.SensorEvaluationContext,
    conn: DuckDBPyConnection,
    settings: HsiSettings,
    window_cursor: str | None,
    as_of: datetime,
) -> WindowPlan:
    """Each closed window once (run_key = batch_id), failed ones again after a back-off, given up after
    MAX_ATTEMPTS (core/batch_policy.py, the rules `hsi process` follows too); capped per tick."""
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


def _partition_requests(new_partitions: list[str]) -> list[dg.AddDynamicPartitionsRequest]:
    return [batch_partitions.build_add_request(new_partitions)] if new_partitions else []


# ------------------------------------------------------------------------------------------------ holding a tick
HOLD_POLL_SECONDS = 0.1
HOLD_LINGER_SECONDS = 0.5  # a tick with runs to request still waits this long for the next close (same tick)


def _version(watch: Sequence[str | os.PathLike[str]]) -> tuple[int | None, ...]:
    """Changes whenever a watched file is written, or a file is created, renamed or removed in a watched folder
    (a stat each: cheap to poll)."""
    versions: list[int | None] = []
    for path in watch:
        try:
            versions.append(os.stat(path).st_mtime_ns)
        except OSError:
            versions.append(None)
    return tuple(versions)


def wait_for_change(due: float | None, until: float, watch: Sequence[str | os.PathLike[str]] = ()) -> bool:
    """Sleep until `due` (a window may close), a change in what is watched (an inbox file, a database write), or
    `until`. False when `until` came first: the tick should end."""
    seen = _version(watch)
    while True:
        now = time.time()
        if now >= until:
            return False
        if due is not None and now >= due:
            return True
        time.sleep(max(0.0, min(HOLD_POLL_SECONDS, until - now, (due - now) if due is not None else until)))
        if watch and _version(watch) != seen:
            return True


def keep_holding(has_requests: bool, due: float | None, hold_until: float) -> bool:
    """Dagster's sensor daemon evaluates sensors every 5 s whatever their minimum interval, so a window closing
    just after a tick would wait up to 5 s for the next one. A tick therefore holds on (up to SENSOR_HOLD_SECONDS,
    watching) until it has a run to request, and then only lingers for a close due within HOLD_LINGER_SECONDS."""
    if not has_requests:
        return True
    return due is not None and due <= min(time.time() + HOLD_LINGER_SECONDS, hold_until)


def next_due(plan: WindowPlan, delay: float) -> float | None:
    """When to plan again even if nothing new is seen: the plan's next change, once the write delay has passed."""
    return plan.next_change + delay if plan.next_change is not None else None


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
                plan = _plan_windows(context, conn, settings, context.cursor, datetime.now(UTC))
            due = next_due(plan, 0.0)
            if not keep_holding(bool(plan.requests), due, hold_until):
                break
            if not wait_for_change(due, hold_until, written_files(duckdb.database)):
                break
    except DatabaseNotFound as exc:
        return dg.SkipReason(str(exc))
    return dg.SensorResult(
        run_requests=plan.requests,
        dynamic_partitions_requests=_partition_requests(plan.new_partitions),
        cursor=plan.cursor.to_json(),
    )


# ------------------------------------------------------------------------------------------------ the inbox
INBOX_MAX_FILES_PER_TICK = 500
INBOX_MAX_BYTES_PER_TICK = 32 * 2**20  # a larger file is ingested by a run of ingest_job instead
INBOX_MAX_SECONDS_PER_TICK = 20.0  # well under the daemon's 60 s sensor timeout


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


class InboxTick:
    """One tick of inbox_sensor: loads the new files (possibly in several rounds while the tick holds on) and
    plans the windows closed by then; what it loaded and handed on becomes the tick's result."""

    def __init__(
        self, context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, settings: HsiSettings, inbox: Path
    ) -> None:
        self.context, self.duckdb, self.settings, self.inbox = context, duckdb, settings, inbox
        self.started = time.time()
        self.cursor = InboxCursor.from_json(context.cursor)
        self.handled: dict[str, str] = {}
        self.ingest_runs: list[dg.RunRequest] = []
        self.reports: list[FileReport] = []
        self.failed: dict[str, str] = {}
        self.pending: list[InboxFile] = []  # left for the next tick (bounds)
        self.listed_at = self.started
        self.loaded_files = self.loaded_bytes = 0

    def load_new_files(self) -> bool:
        """Loads the files not handled yet, within the tick's bounds; True if any was loaded or handed on. If the
        tick dies midway, files loaded so far stay loaded and are skipped next time (the cursor is not advanced)."""
        self.listed_at = time.time()
        listed = inbox_files(self.inbox)
        known = {**self.cursor.files, **self.handled}
        self.handled = {str(f.path): f.version for f in listed if known.get(str(f.path)) == f.version}
        new = [f for f in listed if str(f.path) not in self.handled]
        budget = INBOX_MAX_BYTES_PER_TICK - self.loaded_bytes
        to_load: list[InboxFile] = []
        self.pending, handed_on = [], False
        for f in new:
            if f.size > INBOX_MAX_BYTES_PER_TICK:
                self.ingest_runs.append(
                    dg.RunRequest(
                        job_name=ingest_job.name,
                        run_key=f"{f.path.name}:{f.version}",
                        run_config=dg.RunConfig(ops={"detections": IngestConfig(paths=[str(f.path.resolve())])}),
                    )
                )
                self.handled[str(f.path)] = f.version
                handed_on = True
            elif self.loaded_files + len(to_load) < INBOX_MAX_FILES_PER_TICK and f.size <= budget and not self.pending:
                to_load.append(f)
                budget -= f.size
            else:
                self.pending.append(f)
        if to_load:
            with self.duckdb.get_connection() as conn:
                for index, f in enumerate(to_load):
                    if time.time() - self.started > INBOX_MAX_SECONDS_PER_TICK:
                        self.pending[:0] = to_load[index:]
                        break
                    try:
                        report = ingest_files(conn, [f.path], settings=self.settings, skip_already_ingested=True)
                    except IngestError as exc:  # unreadable or corrupt: named in the log, not retried until it changes
                        self.context.log.error(str(exc))
                        self.failed[str(f.path)] = str(exc)
                    else:
                        self.reports += report.files
                    self.handled[str(f.path)] = f.version
                    self.loaded_files += 1
                    self.loaded_bytes += f.size
        return bool(to_load) or handed_on

    def plan(self) -> WindowPlan | None:
        """Windows are decided only up to the oldest file still waiting (all older files are loaded by now) and
        INBOX_WRITE_DELAY_SECONDS before the listing (a file still being written may hold older detections)."""
        as_of = min([self.listed_at] + [f.mtime_ns / 1e9 for f in self.pending])
        as_of -= self.settings.INBOX_WRITE_DELAY_SECONDS
        try:
            with self.duckdb.get_connection(read_only=True) as conn:
                return _plan_windows(
                    self.context, conn, self.settings, self.cursor.windows, datetime.fromtimestamp(as_of, UTC)
                )
        except DatabaseNotFound:
            return None

    def result(self, plan: WindowPlan | None) -> dg.SensorResult:
        if self.pending:
            self.context.log.info(f"{len(self.pending)} inbox files left for the next tick (bounds per tick)")
        events = []
        if self.reports or self.failed:
            events.append(
                dg.AssetMaterialization(
                    asset_key=DETECTIONS_KEY,
                    description=f"{len(self.reports)} inbox files loaded by inbox_sensor",
                    metadata={
                        "files": dg.MetadataValue.json([r.source for r in self.reports]),
                        "loaded": sum(r.loaded for r in self.reports),
                        "duplicates_skipped": sum(r.duplicates for r in self.reports),
                        "quarantined": sum(r.quarantined for r in self.reports),
                        "already_ingested": sum(r.skipped for r in self.reports),
                        "failed": dg.MetadataValue.json(self.failed),
                        "elapsed_s": round(time.time() - self.started, 3),
                    },
                )
            )
        return dg.SensorResult(
            run_requests=self.ingest_runs + (plan.requests if plan else []),
            asset_events=events,
            dynamic_partitions_requests=_partition_requests(plan.new_partitions if plan else []),
            cursor=InboxCursor(self.handled, plan.cursor.to_json() if plan else self.cursor.windows).to_json(),
        )


@dg.sensor(
    jobs=[ingest_job, batch_pipeline_job], minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING
)
def inbox_sensor(
    context: dg.SensorEvaluationContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.SensorResult | dg.SkipReason:
    """Files dropped in HSI_INBOX_DIR are loaded here, in the tick (a run per file cost seconds each and queued
    behind one another), and reported as `detections` materializations; then the windows closed by then are
    planned and their runs requested in the same tick. The tick holds on (SENSOR_HOLD_SECONDS), loading files
    as they appear and planning again at each window's close and after each database write (detections may also
    come from `hsi ingest` or Frigate), and ends as soon as it has runs to request (not at the next tick, up to
    5 s later). Bounded per tick (files, bytes, seconds); a file over the byte bound
    goes to a run of ingest_job. Each file is loaded once, also after a restart or a tick that died midway:
    `ingested_files` keys on path, size and modification time, and re-loading a file is a no-op."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    if not inbox.is_dir():
        return dg.SkipReason(f"no inbox folder at {inbox}")
    tick = InboxTick(context, duckdb, settings, inbox)
    tick.load_new_files()
    plan = tick.plan()
    hold_until = tick.started + settings.SENSOR_HOLD_SECONDS
    delay = settings.INBOX_WRITE_DELAY_SECONDS
    # New inbox files, and detections written to the database by other paths (`hsi ingest`, Frigate) meanwhile.
    watch: list[str | os.PathLike[str]] = [inbox, *written_files(duckdb.database)]
    while not tick.pending:  # also before the database exists: the first file may arrive during the hold
        due = next_due(plan, delay) if plan else None
        if not keep_holding(bool((plan and plan.requests) or tick.ingest_runs), due, hold_until):
            break
        if not wait_for_change(due, hold_until, watch):
            break
        tick.load_new_files()
        plan = tick.plan()
    return tick.result(plan)


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
