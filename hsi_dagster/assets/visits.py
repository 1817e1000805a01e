"""A batch's visit in the Dagster layer: `link_into_visit` links the batch's sighting into its visit when its context
is stored (enriched_contexts) and records the visit's own level; `link_evidence_alert` links an evidence-only
alert's detections the same way (sensors/alerts.py, before the alert is posted); `visit_metadata` shows the visit on
the batch's materializations (enriched_contexts, risk_assessments): the visit's id, cameras with local times, level,
reasons and why each batch joined it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

import dagster as dg

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.history import approach_relations
from hsi_dagster.core.context.patterns import batch_pattern
from hsi_dagster.core.verdict.alerts import VisitRef, already_alerted
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.core.verdict.evidence_alerts import EvidenceAlert
from hsi_dagster.core.verdict.exceptions import ExceptionPolicy, exception_for
from hsi_dagster.core.verdict.visit_rules import EARLIER_WINDOW, NIGHTS_WINDOW, repeat_nights
from hsi_dagster.core.visits.adjacency import Adjacency
from hsi_dagster.core.visits.facts import visit_facts
from hsi_dagster.core.visits.linking import EVIDENCE_PREFIX, Visit, VisitRules
from hsi_dagster.core.visits.sighting import Sighting
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import sighting_for, visit_level_for
from hsi_dagster.storage.evidence_alerts import alerts_for_batch
from hsi_dagster.storage.exceptions import exceptions_in_force
from hsi_dagster.storage.frigate_config import load_camera_groups
from hsi_dagster.storage.visits import (
    link_batch,
    record_visit_level,
    visit_alerts,
    visit_links,
    visit_of_batch,
    visits_before,
    visits_sharing_names,
)


def visit_rules_for(settings: HsiSettings, profiles: Mapping[str, CameraProfile] | None = None) -> VisitRules:
    """The VISIT_* settings with the site's camera adjacency: the profiles' `approached_from` and Frigate's camera
    groups (FRIGATE_CONFIG_PATH); time alone when neither is known."""
    approached, _ = approach_relations(profiles or {})
    adjacency = Adjacency.of(approached, load_camera_groups(settings.FRIGATE_CONFIG_PATH))
    return VisitRules.from_settings(settings, adjacency=adjacency)


def other_nights(conn, visit: Visit, settings: HsiSettings, enriched: EnrichedContext | None, now: datetime) -> list:
    """The week's visits sharing a plate or name with this one (storage/visits.py `visits_sharing_names`), or []
    when the repeat-nights rule would not fire or a household exception is in force for the batch's pattern (the
    corrections' own matching: core/verdict/exceptions.py `exception_for`; an evidence alert, with no batch
    context, leaves the rule to its batch)."""
    if enriched is None:
        return []
    names = sorted(visit.names - visit.known_identities)
    others = visits_sharing_names(conn, visit, names, NIGHTS_WINDOW)
    rules = EvidenceRules.from_settings(settings)
    if repeat_nights(visit_facts(visit), [visit_facts(o) for o in others], rules) is None:
        return []
    camera = enriched.batch.camera_id
    exceptions = exceptions_in_force(conn, camera, rules, ExceptionPolicy.from_settings(settings), now)
    return [] if exception_for(exceptions, batch_pattern(enriched), now) is not None else others


def _link(
    conn,
    sighting: Sighting,
    settings: HsiSettings,
    rules: VisitRules,
    replaces: tuple[str, ...] = (),
    enriched: EnrichedContext | None = None,
) -> tuple[Visit, str]:
    """Link the sighting (nothing twice: keyed by its id) and raise the visit's level to what its facts now justify;
    (the visit as stored, why it was linked there)."""
    now = datetime.now(UTC)
    visit, _, why = link_batch(conn, sighting, rules, now, replaces=replaces)
    level = visit_level_for(
        visit,
        settings,
        visits_before(conn, visit, EARLIER_WINDOW),
        other_nights=other_nights(conn, visit, settings, enriched, now),
    )
    if level.score > 0:
        record_visit_level(conn, visit.visit_id, level.score, level.level, level.reasons, now)
    stored = visit_of_batch(conn, sighting.batch_id)
    if stored is None:
        raise LookupError(f"{sighting.batch_id}: linked to {visit.visit_id}, which is not in `visits`")
    return stored, why


def link_into_visit(
    conn,
    enriched: EnrichedContext,
    profile: CameraProfile | None,
    settings: HsiSettings,
    *,
    profiles: Mapping[str, CameraProfile] | None = None,
) -> tuple[Visit | None, str]:
    """Link the batch into its visit, taking the place of the evidence-only alerts already linked for its detections;
    (the visit as stored, why it was linked there), (None, why not) when the batch shows nobody."""
    sighting = sighting_for(enriched, profile, settings)
    if sighting is None:
        return None, "no person or vehicle: no visit"
    batch_id = enriched.batch.batch_id
    replaces = tuple(EVIDENCE_PREFIX + alert["alert_key"] for alert in alerts_for_batch(conn, batch_id))
    return _link(conn, sighting, settings, visit_rules_for(settings, profiles), replaces, enriched)


def visit_ref(visit: Visit) -> VisitRef:
    return VisitRef(visit.visit_id, visit.cameras, visit.level, visit.reasons)


def link_evidence_alert(
    conn, alert: EvidenceAlert, settings: HsiSettings, profiles: Mapping[str, CameraProfile] | None = None
) -> tuple[EvidenceAlert, str | None]:
    """Link the alert's detections into the site's visit (as `evidence:<key>`; nothing twice) and name the visit on
    the alert; (the alert, the id of an alert the visit already raised at this level or above, or None)."""
    if alert.sighting is None:  # a weapon with no person or vehicle: no visit
        return alert, None
    visit, _ = _link(conn, alert.sighting, settings, visit_rules_for(settings, profiles))
    own = EVIDENCE_PREFIX + alert.alert_key
    earlier = [(alert_id, level) for alert_id, level in visit_alerts(conn, visit.visit_id) if alert_id != own]
    return replace(alert, visit=visit_ref(visit)), already_alerted(alert.risk_level, earlier)


def named_visit(conn, alert: EvidenceAlert) -> EvidenceAlert:
    """The alert with the visit it was linked into when it was claimed (a pending alert read back from storage)."""
    visit = visit_of_batch(conn, EVIDENCE_PREFIX + alert.alert_key)
    return alert if visit is None else replace(alert, visit=visit_ref(visit))


def visit_metadata(
    visit: Visit | None, why: str | None = None, links: list[tuple[str, str, str]] | None = None
) -> dict:
    """The visit's columns on a batch's materialization; `links`: (batch, camera, reason) of each link
    (storage/visits.py `visit_links`)."""
    if visit is None:
        return {"visit_id": "none", **({"visit_link": why} if why else {})}
    facts = visit_facts(visit)
    reasons = "\n".join(f"- {reason}" for reason in visit.reasons) or "- no visit rule fired"
    still = f"{facts.longest_still_s:.0f} s at {facts.still_where}" if facts.still_where else "none"
    linked = "; ".join(f"{camera} {batch}: {reason}" for batch, camera, reason in links or ())
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
        **({"visit_links": linked} if linked else {}),
        **({"visit_link": why} if why else {}),
    }


def stored_visit_metadata(conn, visit: Visit | None, why: str | None = None) -> dict:
    """`visit_metadata` with the visit's link reasons read from storage."""
    return visit_metadata(visit, why, visit_links(conn, visit.visit_id) if visit is not None else None)
