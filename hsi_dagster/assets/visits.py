"""A batch's visit in the Dagster layer: `link_into_visit` links the batch's sighting into its visit when its context
is stored (enriched_contexts) and records the visit's own level; `visit_metadata` shows it on the batch's
materializations (enriched_contexts, risk_assessments): the visit's id, cameras with local times, level and reasons.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.verdict.visit_rules import EARLIER_WINDOW
from hsi_dagster.core.visits.facts import visit_facts
from hsi_dagster.core.visits.linking import Visit, VisitRules
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import sighting_for, visit_level_for
from hsi_dagster.storage.visits import link_batch, record_visit_level, visit_of_batch, visits_before


def link_into_visit(
    conn, enriched: EnrichedContext, profile: CameraProfile | None, settings: HsiSettings
) -> tuple[Visit | None, str]:
    """Link the batch into its visit (nothing twice: keyed by batch) and raise the visit's level to what its facts
    now justify; (the visit as stored, why it was linked there), (None, why not) when the batch shows nobody."""
    sighting = sighting_for(enriched, profile, settings)
    if sighting is None:
        return None, "no person or vehicle: no visit"
    now = datetime.now(UTC)
    visit, _, why = link_batch(conn, sighting, VisitRules.from_settings(settings), now)
    level = visit_level_for(visit, settings, visits_before(conn, visit, EARLIER_WINDOW))
    if level.score > 0:
        record_visit_level(conn, visit.visit_id, level.score, level.level, level.reasons, now)
    return visit_of_batch(conn, enriched.batch.batch_id), why


def visit_metadata(visit: Visit | None, why: str | None = None) -> dict:
    """The visit's columns on a batch's materialization."""
    if visit is None:
        return {"visit_id": "none", **({"visit_link": why} if why else {})}
    facts = visit_facts(visit)
    reasons = "\n".join(f"- {reason}" for reason in visit.reasons) or "- no visit rule fired"
    still = f"{facts.longest_still_s:.0f} s at {facts.still_where}" if facts.still_where else "none"
    return {
        "visit_id": visit.visit_id,
        "visit_cameras": facts.cameras_text(),
        "visit_batches": facts.batches,
        "visit_span_s": round(facts.span_s, 1),
        "visit_level": visit.level,
        "visit_score": visit.score,
        "visit_known": facts.known,
        "visit_reached": facts.reached or "none",
        "visit_longest_still": still,
        "visit_reasons": dg.MetadataValue.md(reasons),
        **({"visit_link": why} if why else {}),
    }
