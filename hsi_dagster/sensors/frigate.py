"""frigate_events_sensor: Frigate's HTTP API polled for ended events -> detections (contract section 5)."""

import json
import time

import dagster as dg

from hsi_dagster.core.frigate.api_cursor import ApiCursor, plan_api_pull
from hsi_dagster.core.intake.detections import Bounds
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.sensors.default_status import default_status_when
from hsi_dagster.storage.frigate import load_live_messages

FRIGATE_MAX_EVENTS_PER_TICK = 1000
FRIGATE_MAX_HOLD_SECONDS = 3600.0  # an event still in progress after this long is pulled as it is


def _frigate_default_status() -> dg.DefaultSensorStatus:
    """On by default only when FRIGATE_URL is set where the code location loads (turn it on in the UI otherwise)."""
    return default_status_when(lambda settings: bool(settings.FRIGATE_URL))


@dg.sensor(minimum_interval_seconds=30, default_status=_frigate_default_status())
def frigate_events_sensor(
    context: dg.SensorEvaluationContext,
    frigate: FrigateResource,
    duckdb: HsiDuckDBResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.SkipReason:
    """Frigate's /api/events after the cursor -> detections (contract section 5), each event once, after it ended
    (core.frigate.api_cursor.plan_api_pull); a failed write leaves the cursor where it was, so the next tick retries."""
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
            source=frigate.source_name("/api/events"),
            resolutions={},  # an API event's box is relative to its frame already
            kind="api_event",
            bounds=Bounds.from_settings(pipeline_settings.get()),
        )
        summary = report.summary()
    context.update_cursor(plan.cursor.to_json())
    return dg.SkipReason(f"{len(events)} events read, {plan.waiting} still in progress; {summary}")
