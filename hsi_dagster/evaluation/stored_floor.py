"""The evidence floor of a stored batch, as production computes it: the `risk_assessments` asset calls it for the
verdict it stores, and the household replay (evaluation/household.py) calls it for a corrected batch, so "the replay
is faithful" holds by construction.

The floor reads the batch's stored context, the camera's profile as configured now, the history facts stored with
the context, the camera's household exceptions in force at the moment of judgement (`now`), a fast-path batch's
track so far, the evidence-only alerts already sent for its detections and the batch's visit (both may only raise).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.verdict.evidence import EvidenceRules, Floor
from hsi_dagster.core.verdict.exceptions import ExceptionPolicy, HouseholdException
from hsi_dagster.core.verdict.final import raised_by_evidence_alerts
from hsi_dagster.core.verdict.track_so_far import TRACK_LOOKBACK_SECONDS, TRACK_MAX_DETECTIONS, with_track_so_far
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import context_for_batch, floor_for, floor_with_visit
from hsi_dagster.storage.batches import load_batch, track_detections_before
from hsi_dagster.storage.evidence_alerts import alerts_for_batch
from hsi_dagster.storage.exceptions import exceptions_in_force
from hsi_dagster.storage.pipeline_tables import load_context_json
from hsi_dagster.storage.visits import visit_of_batch


def batch_floor(
    conn, batch_id: str, camera_id: str, settings: HsiSettings, profiles: dict, now: datetime | None = None
) -> tuple[Floor, list[str]]:
    """The evidence floor of a stored batch (its EnrichedContext, the camera's profile as configured now, the
    history facts, the camera's household exceptions in force `now`), raised to the evidence-only alerts already
    sent for its detections and to its visit's level (storage/visits.py: a batch judged later in a visit starts from
    the visit's level); and those alerts' keys."""
    enriched = EnrichedContext.from_json(load_context_json(conn, batch_id))
    profile = profiles.get(camera_id) or enriched.camera_profile
    now = now or datetime.now(UTC)
    exceptions = exceptions_in_force(
        conn, camera_id, EvidenceRules.from_settings(settings), ExceptionPolicy.from_settings(settings), now
    )
    floor = floor_for(enriched, profile, enriched.history, settings, exceptions, now)
    if enriched.batch.close_reason == "fast_path":
        floor = fast_path_floor(conn, batch_id, floor, enriched, profile, settings, exceptions, now)
    alerts = alerts_for_batch(conn, batch_id)
    floor = floor_with_visit(raised_by_evidence_alerts(floor, alerts), visit_of_batch(conn, batch_id))
    return floor, [alert["alert_key"] for alert in alerts]


def fast_path_floor(
    conn,
    batch_id: str,
    own: Floor,
    enriched: EnrichedContext,
    profile: CameraProfile | None,
    settings: HsiSettings,
    exceptions: Sequence[HouseholdException] = (),
    now: datetime | None = None,
) -> Floor:
    """A fast-path batch's floor with what its track has shown so far (core/verdict/track_so_far.py): the same
    track's earlier detections on this camera, bounded in time and number, judged with the batch's own."""
    batch, detections = load_batch(conn, batch_id)
    tracks = sorted({d["track_id"] for d in detections if d.get("track_id")})
    since = batch["started_at"] - timedelta(seconds=TRACK_LOOKBACK_SECONDS)
    earlier = track_detections_before(
        conn, batch["camera_id"], tracks, since, batch["started_at"], TRACK_MAX_DETECTIONS
    )
    if not earlier:
        return own
    so_far_batch = {**batch, "started_at": earlier[0]["ts"], "close_reason": "window", "detection_count": None}
    context = context_for_batch(
        so_far_batch,
        earlier + detections,
        settings,
        camera_profile=profile,
        quality_level=enriched.quality_level,
        history=enriched.history,
    )
    so_far = floor_for(context, profile, enriched.history, settings, exceptions, now)
    return with_track_so_far(own, so_far, len(earlier), earlier[0]["ts"])
