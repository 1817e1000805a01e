"""inbox_sensor: files dropped in HSI_INBOX_DIR are loaded in the tick, then the windows closed by then get runs."""

import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from duckdb import DuckDBPyConnection

from hsi_dagster.assets.ingest import IngestConfig
from hsi_dagster.jobs import batch_pipeline_job, ingest_job
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.sensors.alerts import alert_on_evidence
from hsi_dagster.sensors.hold import keep_holding, next_due, wait_for_change, watched_version
from hsi_dagster.sensors.inbox_archive import prune_archive, retire
from hsi_dagster.sensors.window_planning import WindowPlan, partition_requests, plan_windows
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.db import DatabaseNotFound, written_files
from hsi_dagster.storage.ingest import FileReport, IngestError, already_ingested, ingest_files

DETECTIONS_KEY = dg.AssetKey("detections")
INBOX_PATTERNS = ("*.jsonl", "*.jsonl.gz")
INBOX_MAX_FILES_PER_TICK = 500
INBOX_MAX_BYTES_PER_TICK = 32 * 2**20  # a larger file is ingested by a run of ingest_job instead
INBOX_MAX_SECONDS_PER_TICK = 20.0  # well under the daemon's 60 s sensor timeout
INBOX_PRUNE_EVERY_SECONDS = 60.0  # how often a tick looks for archived files past INBOX_RETENTION_HOURS
INBOX_LOCK_WAIT_SECONDS = 20.0  # an inbox tick waits this long for evidence_watch_sensor's load to end, then skips

# One loader at a time in this process (sensors of one code location evaluate in its code server): inbox_sensor
# holds it for its whole tick, evidence_watch_sensor takes it without waiting for each of its short loads.
INBOX_LOADER_LOCK = threading.Lock()


@dataclass(frozen=True)
class HelperBounds:
    """Bounds for a helper that loads the live trickle between inbox ticks (evidence_watch_sensor): files and bytes
    per tick, seconds per load (an inbox tick waiting for the lock waits about that long at most). A file over
    `bytes`, or one that fails to load, is left to inbox_sensor (which hands it on to ingest_job or reports it);
    past the bounds the rest waits for inbox_sensor too."""

    files: int
    bytes: int
    seconds: float


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
    """Files handled and still in the inbox (path -> "size:mtime_ns"; loaded ones leave it, see inbox_archive.py),
    those of them handed to an ingest run (archived once the run has recorded them), when the archive was last
    pruned, and the window planner's cursor. Only a hint: `ingested_files` in DuckDB is what keeps a file from being
    loaded twice."""

    files: dict[str, str] = field(default_factory=dict)
    windows: str | None = None
    handed_on: dict[str, str] = field(default_factory=dict)
    pruned_at: float = 0.0

    @classmethod
    def from_json(cls, text: str | None) -> "InboxCursor":
        if not text:
            return cls()
        data = json.loads(text)
        if "files" not in data or not isinstance(data.get("files"), dict):  # before #17: path -> version only
            return cls(files={k: v for k, v in data.items() if isinstance(v, str)})
        return cls(
            files=dict(data["files"]),
            windows=data.get("windows"),
            handed_on=dict(data.get("handed_on") or {}),
            pruned_at=float(data.get("pruned_at") or 0.0),
        )

    def to_json(self) -> str:
        return json.dumps(
            {"files": self.files, "windows": self.windows, "handed_on": self.handed_on, "pruned_at": self.pruned_at},
            sort_keys=True,
            separators=(",", ":"),
        )


class InboxTick:
    """One tick of inbox_sensor: loads the new files (possibly in several rounds while the tick holds on) and
    plans the windows closed by then; what it loaded and handed on becomes the tick's result."""

    def __init__(
        self,
        context: dg.SensorEvaluationContext,
        duckdb: HsiDuckDBResource,
        settings: HsiSettings,
        inbox: Path,
        helper: HelperBounds | None = None,
    ) -> None:
        self.context, self.duckdb, self.settings, self.inbox = context, duckdb, settings, inbox
        self.helper = helper  # None: inbox_sensor's own tick (INBOX_MAX_* bounds, read when used)
        self.started = time.time()
        self.cursor = InboxCursor.from_json(context.cursor)
        self.handled: dict[str, str] = {}
        self.handed_on = dict(self.cursor.handed_on)
        self.retired: list[str] = []  # loaded and recorded, then archived (or deleted)
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
        max_files, max_bytes = (
            (self.helper.files, self.helper.bytes)
            if self.helper
            else (INBOX_MAX_FILES_PER_TICK, INBOX_MAX_BYTES_PER_TICK)
        )
        budget = max_bytes - self.loaded_bytes
        to_load: list[InboxFile] = []
        self.pending, handed_on = [], False
        for f in new:
            if self.helper and f.size > max_bytes:
                self.handled[str(f.path)] = f.version  # left to inbox_sensor
            elif f.size > INBOX_MAX_BYTES_PER_TICK:
                self.ingest_runs.append(
                    dg.RunRequest(
                        job_name=ingest_job.name,
                        run_key=f"{f.path.name}:{f.version}",
                        run_config=dg.RunConfig(ops={"detections": IngestConfig(paths=[str(f.path.resolve())])}),
                    )
                )
                self.handled[str(f.path)] = self.handed_on[str(f.path)] = f.version
                handed_on = True
            elif self.loaded_files + len(to_load) < max_files and f.size <= budget and not self.pending:
                to_load.append(f)
                budget -= f.size
            else:
                self.pending.append(f)
        self.handed_on = {path: v for path, v in self.handed_on.items() if self.handled.get(path) == v}
        loaded: list[InboxFile] = []
        deadline = time.time() + self.helper.seconds if self.helper else self.started + INBOX_MAX_SECONDS_PER_TICK
        if to_load:
            with self.duckdb.get_connection() as conn:
                for index, f in enumerate(to_load):
                    if time.time() > deadline:
                        self.pending[:0] = to_load[index:]
                        break
                    try:
                        report = ingest_files(conn, [f.path], settings=self.settings, skip_already_ingested=True)
                    except IngestError as exc:  # unreadable or corrupt: named in the log, not retried until it changes
                        if self.helper:  # inbox_sensor reports it (once)
                            self.context.log.info(f"left to inbox_sensor: {exc}")
                        else:
                            self.context.log.error(str(exc))
                            self.failed[str(f.path)] = str(exc)
                    else:
                        self.reports += report.files
                        loaded.append(f)
                    self.handled[str(f.path)] = f.version
                    self.loaded_files += 1
                    self.loaded_bytes += f.size
                self.retire_recorded(conn, loaded)
        elif self.handed_on:  # files an ingest run may have loaded since
            with self.duckdb.get_connection() as conn:
                self.retire_recorded(conn, [f for f in listed if str(f.path) in self.handed_on])
        return bool(to_load) or handed_on

    def retire_recorded(self, conn: DuckDBPyConnection, files: list[InboxFile]) -> None:
        """Take the files `ingested_files` records as they are now (loaded to their end) out of the inbox and the
        cursor (inbox_archive.py). One that changed since, or cannot be moved, stays for the next round."""
        retention = self.settings.INBOX_RETENTION_HOURS
        for f in files:
            try:
                now = f.path.stat()
                if not already_ingested(conn, f.path, now.st_size, now.st_mtime_ns):
                    continue
                retire(f.path, retention)
            except OSError as exc:
                self.context.log.warning(f"loaded inbox file {f.path} stays in the inbox: {exc}")
                continue
            self.handled.pop(str(f.path), None)
            self.handed_on.pop(str(f.path), None)
            self.retired.append(f.path.name)

    def prune_archive(self) -> float:
        """Delete archived files past INBOX_RETENTION_HOURS, at most every INBOX_PRUNE_EVERY_SECONDS; returns when
        the archive was last pruned (for the cursor)."""
        retention = self.settings.INBOX_RETENTION_HOURS
        if retention <= 0 or self.started - self.cursor.pruned_at < INBOX_PRUNE_EVERY_SECONDS:
            return self.cursor.pruned_at
        pruned = prune_archive(self.inbox, retention, self.started)
        if pruned:
            self.context.log.info(f"{len(pruned)} archived inbox files older than {retention:g} h deleted")
        return self.started

    def plan(self) -> WindowPlan | None:
        """Windows are decided only up to the oldest file still waiting (all older files are loaded by now) and
        INBOX_WRITE_DELAY_SECONDS before the listing (a file still being written may hold older detections)."""
        as_of = min([self.listed_at] + [f.mtime_ns / 1e9 for f in self.pending])
        as_of -= self.settings.INBOX_WRITE_DELAY_SECONDS
        try:
            with self.duckdb.get_connection(read_only=True) as conn:
                return plan_windows(
                    self.context, conn, self.settings, self.cursor.windows, datetime.fromtimestamp(as_of, UTC)
                )
        except DatabaseNotFound:
            return None

    def events(self, loader: str) -> list[dg.AssetMaterialization]:
        """The `detections` materialization reporting what this tick loaded (none when it loaded nothing)."""
        events = []
        if self.reports or self.failed:
            events.append(
                dg.AssetMaterialization(
                    asset_key=DETECTIONS_KEY,
                    description=f"{len(self.reports)} inbox files loaded by {loader}",
                    metadata={
                        "files": dg.MetadataValue.json([r.source for r in self.reports]),
                        "loaded": sum(r.loaded for r in self.reports),
                        "duplicates_skipped": sum(r.duplicates for r in self.reports),
                        "quarantined": sum(r.quarantined for r in self.reports),
                        "already_ingested": sum(r.skipped for r in self.reports),
                        "failed": dg.MetadataValue.json(self.failed),
                        "retired_from_inbox": len(self.retired),
                        "elapsed_s": round(time.time() - self.started, 3),
                    },
                )
            )
        return events

    def result(self, plan: WindowPlan | None) -> dg.SensorResult:
        if self.pending:
            self.context.log.info(f"{len(self.pending)} inbox files left for the next tick (bounds per tick)")
        return dg.SensorResult(
            run_requests=self.ingest_runs + (plan.requests if plan else []),
            asset_events=self.events("inbox_sensor"),
            dynamic_partitions_requests=partition_requests(plan.new_partitions if plan else []),
            cursor=InboxCursor(
                self.handled,
                plan.cursor.to_json() if plan else self.cursor.windows,
                self.handed_on,
                self.prune_archive(),
            ).to_json(),
        )


@dg.sensor(
    jobs=[ingest_job, batch_pipeline_job], minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING
)
def inbox_sensor(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
    alert_webhook: AlertWebhookResource,
) -> dg.SensorResult | dg.SkipReason:
    """Files dropped in HSI_INBOX_DIR are loaded here, in the tick (a run per file cost seconds each and queued
    behind one another), and reported as `detections` materializations; then the windows closed by then are
    planned and their runs requested in the same tick. The tick holds on (SENSOR_HOLD_SECONDS), loading files
    as they appear and planning again at each window's close and after each database write (detections may also
    come from `hsi ingest` or Frigate), and ends as soon as it has runs to request (not at the next tick, up to
    5 s later). Bounded per tick (files, bytes, seconds); a file over the byte bound
    goes to a run of ingest_job. Each file is loaded once, also after a restart or a tick that died midway:
    `ingested_files` keys on path, size and modification time, and re-loading a file is a no-op. After each load
    (and each write by another path) detections whose evidence alone is high or critical alert at once, before
    any window closes (sensors/alerts.py `alert_on_evidence`). Between these ticks evidence_watch_sensor loads
    the files that land (sensors/evidence_watch.py): the tick holds INBOX_LOADER_LOCK, so never both at once."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    if not inbox.is_dir():
        return dg.SkipReason(f"no inbox folder at {inbox}")
    started = time.time()  # the hold counts from here: the next daemon loop is due ~5 s after the tick began
    if not INBOX_LOADER_LOCK.acquire(timeout=INBOX_LOCK_WAIT_SECONDS):
        return dg.SkipReason(f"evidence_watch_sensor kept loading for {INBOX_LOCK_WAIT_SECONDS:g} s; next tick")
    try:
        return inbox_tick(context, duckdb, pipeline_settings, alert_webhook, settings, inbox, started)
    finally:
        INBOX_LOADER_LOCK.release()


def inbox_tick(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
    alert_webhook: AlertWebhookResource,
    settings: HsiSettings,
    inbox: Path,
    started: float,
) -> dg.SensorResult:
    """inbox_sensor's tick, under INBOX_LOADER_LOCK: load, alert, plan; hold on while nothing is to request."""
    tick = InboxTick(context, duckdb, settings, inbox)
    # New inbox files, and detections written to the database by other paths (`hsi ingest`, Frigate) meanwhile.
    watch: list[str | os.PathLike[str]] = [inbox, *written_files(duckdb.database)]
    seen = watched_version(watch)  # before the listing: a file landing while this round loads, alerts or plans
    tick.load_new_files()  # wakes the next wait at once (our own writes cost one more, empty round)
    alert_on_evidence(context, duckdb, pipeline_settings, alert_webhook)
    plan = tick.plan()
    hold_until = started + settings.SENSOR_HOLD_SECONDS
    delay = settings.INBOX_WRITE_DELAY_SECONDS
    while not tick.pending:  # also before the database exists: the first file may arrive during the hold
        due = next_due(plan, delay) if plan else None
        if not keep_holding(bool((plan and plan.requests) or tick.ingest_runs), due, hold_until):
            break
        if not wait_for_change(due, hold_until, watch, seen):
            break
        seen = watched_version(watch)
        tick.load_new_files()
        alert_on_evidence(context, duckdb, pipeline_settings, alert_webhook)
        plan = tick.plan()
    return tick.result(plan)
