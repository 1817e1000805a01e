"""evidence_watch_sensor: the alert before the LLM also while no inbox_sensor tick is running.

Dagster's sensor daemon starts each sensor's tick in a loop of 5 s and skips a sensor whose tick is still running.
inbox_sensor's tick loads files as they land and alerts after each load, but it ends as soon as it has runs to
request (so that a closed window's run starts at once): a file landing after that waited for the next loop, up to
5 s, for its evidence-only alert. This sensor's tick holds on beside it (SENSOR_HOLD_SECONDS, watching the inbox
folder and the database files) and, whenever no inbox tick holds INBOX_LOADER_LOCK, loads what landed through the
same loader (InboxTick) and runs the evidence pass. Without an inbox folder it runs the pass after each database
write (`hsi ingest`, Frigate), which the 15 s high_risk_alert_sensor used to do.

Never two loaders at once: sensors of one code location evaluate in one process (the code server); inbox_sensor
holds the lock for its whole tick, this sensor takes it without waiting, for one short load and the claims, and
posts outside it, so a slow webhook never delays an inbox tick. Across processes the database's lock file and
`ingested_files` (path, size, modification time) still keep each file loaded once; the claim before the post keeps
each alert posted once. What it cannot load quickly and cleanly (a file over EVIDENCE_WATCH_BOUNDS, one that fails
to load, a bulk drop past the bounds) is left to inbox_sensor, which hands it on or reports it."""

import os
import time
from pathlib import Path

import dagster as dg

from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.sensors.alerts import claim_on_evidence, post_claimed
from hsi_dagster.sensors.hold import HOLD_POLL_SECONDS, watched_version
from hsi_dagster.sensors.inbox import INBOX_LOADER_LOCK, HelperBounds, InboxCursor, InboxTick
from hsi_dagster.storage.db import written_files

# The live trickle (a file a second or so), loaded within a fraction of a second; an inbox tick waiting for the lock
# waits at most about `seconds`.
EVIDENCE_WATCH_BOUNDS = HelperBounds(files=20, bytes=2 * 2**20, seconds=1.0)


@dg.sensor(minimum_interval_seconds=1, default_status=dg.DefaultSensorStatus.RUNNING)
def evidence_watch_sensor(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
    alert_webhook: AlertWebhookResource,
) -> dg.SensorResult:
    """Between inbox_sensor's ticks: inbox files that land are loaded and evidence-only alerts posted within about
    a poll (0.1 s) instead of at the next daemon loop; without an inbox, the evidence pass after each database
    write. Holds on for SENSOR_HOLD_SECONDS (0: one pass). Reports what it loaded as `detections`
    materializations; its cursor keeps the files it left to inbox_sensor (until they change)."""
    settings = pipeline_settings.get()
    inbox = Path(settings.HSI_INBOX_DIR)
    tick = InboxTick(context, duckdb, settings, inbox, EVIDENCE_WATCH_BOUNDS) if inbox.is_dir() else None
    watch: list[str | os.PathLike[str]] = [*([inbox] if tick else []), *written_files(duckdb.database)]
    hold_until = time.time() + settings.SENSOR_HOLD_SECONDS
    seen: tuple[int | None, ...] | None = None  # what was watched at the last pass; None: a pass at once
    passes = posted = 0
    while not (tick and tick.pending):  # past its bounds: the rest is inbox_sensor's
        version = watched_version(watch)
        if version != seen and INBOX_LOADER_LOCK.acquire(blocking=False):  # else an inbox tick loads and alerts
            try:
                seen, passes = version, passes + 1
                if tick:
                    tick.load_new_files()
                claimed = claim_on_evidence(context, duckdb, pipeline_settings)
            finally:
                INBOX_LOADER_LOCK.release()
            post_claimed(context, duckdb, alert_webhook, claimed)
            posted += len(claimed)
        if time.time() >= hold_until:
            break
        time.sleep(HOLD_POLL_SECONDS)
    events = tick.events("evidence_watch_sensor") if tick else []
    return dg.SensorResult(
        asset_events=events,
        cursor=InboxCursor(files=tick.handled).to_json() if tick and passes else context.cursor,
        skip_reason=None if events else f"{passes} passes while no inbox tick ran, {posted} evidence-only alerts",
    )
