"""frigate_reviews_sensor: Frigate's `/api/review` items -> `frigate_reviews`, for a household on the HTTP API without
MQTT: its review severity and GenAI review summary reach the batches they cover, as `frigate/reviews` does for
`hsi frigate listen`."""

import json
import time

import dagster as dg

from hsi_dagster.core.frigate.api_cursor import ReviewCursor, plan_review_pull
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.frigate import FrigateResource
from hsi_dagster.sensors.default_status import default_status_when
from hsi_dagster.storage.frigate import load_live_messages

FRIGATE_MAX_REVIEW_HOLD_SECONDS = 3600.0  # a review still in progress after this long no longer holds the cursor


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=default_status_when(lambda settings: bool(settings.FRIGATE_URL)),
)
def frigate_reviews_sensor(
    context: dg.SensorEvaluationContext, frigate: FrigateResource, duckdb: HsiDuckDBResource
) -> dg.SkipReason:
    """Review items after the cursor, each new or changed version stored once through the import's path
    (storage.frigate.load_live_messages: one row per review, versions merged); Frigate down or a failed write fails
    the tick and leaves the cursor where it was. A review arriving after its batch was judged is stored for the
    batches judged later; like an MQTT review, it does not ask for the batch to be judged again."""
    if not frigate.url.strip():
        return dg.SkipReason("FRIGATE_URL is not set")
    cursor = ReviewCursor.from_json(context.cursor)
    items = frigate.reviews_after(cursor.after)
    plan = plan_review_pull(
        items,
        cursor,
        now=time.time(),
        settle_seconds=frigate.settle_seconds,
        max_hold_seconds=FRIGATE_MAX_REVIEW_HOLD_SECONDS,
    )
    summary = "nothing new"
    if plan.send:
        report = load_live_messages(
            duckdb.database,
            [(None, json.dumps(item)) for item in plan.send],
            source=frigate.source_name("/api/review"),
            resolutions={},
            kind="api_review",
        )
        summary = report.summary()
    context.update_cursor(plan.cursor.to_json())
    return dg.SkipReason(f"{len(items)} review items read, {plan.open} not final yet; {summary}")
