"""`camera_baselines`: what each camera usually sees at each local hour, the yardstick of every batch's judgment.

How the batch pipeline depends on it without waiting for it: the asset's table is `camera_activity` (detections
per camera, quarter hour and label; storage/history.py). Ingest keeps it current in the same transaction as the
detections, so a batch at 03:10 compares with everything stored up to its own arrival; this daily asset re-derives
the aggregate over the history window from `detections` (correcting any drift), and shows per camera which labels
are usual at which local hours. `enriched_contexts` declares it as a dependency (the lineage in the UI: what a
judgment was compared with) but the batch job does not select it, so no batch run waits for a daily materialization.
"""

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import duckdb

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.history import (
    HistoryFacts,
    HistoryRules,
    approach_relations,
    history_facts,
    hours_text,
    profile_timezone,
    usual_hours,
)
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.storage.history import activity_buckets, activity_summary, history_inputs, reconcile_activity


def batch_history(
    conn: duckdb.DuckDBPyConnection,
    batch: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    profiles: Mapping[str, CameraProfile],
    rules: HistoryRules,
) -> HistoryFacts:
    """The history facts of one recorded batch (its profile's zone and relations, what storage holds)."""
    camera = str(batch["camera_id"])
    profile = profiles.get(camera)
    approached, entries = approach_relations(profiles)
    arrivals = [d["ingested_at"] for d in detections if d.get("ingested_at") is not None]
    inputs = history_inputs(
        conn,
        camera_id=camera,
        batch_start=batch["started_at"],
        batch_labels=sorted({str(d["label"]) for d in detections}),
        arrived_at=min(arrivals) if arrivals else datetime.now(UTC),
        timezone=profile_timezone(profile),
        days=rules.days,
        cross_camera_minutes=rules.cross_camera_minutes,
        former_camera_ids=tuple(profile.former_camera_ids) if profile else (),
        approached_from=approached,
        entry_points=entries,
    )
    return history_facts(inputs, rules)


def history_metadata(facts: HistoryFacts | None) -> dict[str, str]:
    """What a batch was compared with, for its asset metadata (the UI)."""
    if facts is None:
        return {"history": "off"}
    baseline = "; ".join(
        f"{b.label} {b.days_seen}/{b.days_observed} days" + (" (unusual)" if b.label in facts.unusual_labels else "")
        for b in facts.baselines
    )
    return {
        "history_baseline": f"{facts.hour_text} {facts.timezone}: {baseline or 'no labels'}"
        + ("" if facts.enough_history else "; not enough history"),
        "history_assumptions": "; ".join(facts.assumptions) or "none",
        "history_cross_camera": ", ".join(f"{e.camera_id} -{e.seconds_before:g}s" for e in facts.recent_activity)
        or "none",
        "history_path_to_entry": " -> ".join(facts.path_to_entry) or "none",
    }


@dg.asset(group_name="pipeline", kinds={"duckdb"})
def camera_baselines(
    context: dg.AssetExecutionContext, duckdb: HsiDuckDBResource, pipeline_settings: PipelineSettingsResource
) -> dg.MaterializeResult:
    """Per camera, per local hour and label, how many of the last HISTORY_DAYS days saw it (table camera_activity,
    kept at ingest, re-derived here); each batch's enriched context is compared with it."""
    settings = pipeline_settings.get()
    rules = HistoryRules.from_settings(settings)
    profiles = pipeline_settings.camera_profiles()
    now = datetime.now(UTC)
    since = now - timedelta(days=rules.keep_days)
    with duckdb.get_connection() as conn:
        reconciled = reconcile_activity(conn, since)
        summary = activity_summary(conn, since)
        cameras = sorted({row["camera_id"] for row in summary})
        buckets = activity_buckets(conn, cameras, since)
    rows = ["| camera | time zone | days with activity | usual (label: local hours) |", "|---|---|---|---|"]
    for camera in cameras:
        zone = profile_timezone(profiles.get(camera))
        active, usual = usual_hours(
            ((start, label) for cam, start, label in buckets if cam == camera), zone, now=now, days=rules.days
        )
        text = "; ".join(f"{label}: {hours_text(hours)}" for label, hours in usual.items()) or "nothing yet"
        rows.append(f"| {camera} | {zone or 'UTC (assumed)'} | {active} of {rules.days} | {text} |")
    if reconciled.buckets_corrected:
        context.log.warning(f"camera_activity: {reconciled.buckets_corrected} buckets re-derived from detections")
    return dg.MaterializeResult(
        metadata={
            "cameras": len(cameras),
            "buckets": reconciled.buckets,
            "buckets_corrected": reconciled.buckets_corrected,
            "history_days": rules.days,
            "baselines": dg.MetadataValue.md("\n".join(rows)),
        }
    )
