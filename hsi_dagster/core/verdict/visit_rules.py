"""The visit as evidence: the floor a visit's structured facts justify (core/visits/facts.py), and a batch's floor
raised to its visit's level.

Pure code. Reads only the closed-vocabulary facts a visit keeps (cameras, local hours, known or not by recogniser,
zones reached); never free text.

rule               | fires when (a person not known, at night: EvidenceRules.is_night of the sighting's local hour)
-------------------|-------------------------------------------------------------------------------------------------
cameras            | seen on 2 cameras of one visit -> 45 medium; on 3 or more -> 70 high; none of these rules
                   | fires for a visit whose people not known only walked across every view (Sighting.passing)
reached after      | reached an entry or private zone on a camera after another camera of the visit -> 70 high
visit tonight      | an earlier visit of a person not known at night within EARLIER_WINDOW (the same night), and this
                   | visit or that one covered 2+ cameras or reached an entry or private zone -> 70 high
                   | (a passer-by on the pavement camera twice a night is not enough)
repeat nights      | the same plate or re-identified name, not the household's, seen at night on 2 nights of the
                   | last 7 days -> 45 medium ("second night this week"), on 3 or more -> 70 high ("third night this
                   | week: plate AB12CDE (Mon 02:10, Wed 01:40, Thu 02:30)") when this visit comes onto the property
                   | (a person not known on an entry or private zone or 2+ cameras, or the car on the driveway), else
                   | 45 medium: the neighbour's car parked in the street every night is noticed, never an alert every
                   | night. Storage
                   | reads the earlier visits by name (`visits_sharing_names`); not when a household exception is in
                   | force for the batch's pattern (core/verdict/exceptions.py `exception_for`: the caller asks).

A known person (reid.known, a household plate) never fires these; by day they do not fire (the postman's round).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hsi_dagster.core.prompt.risk_schema import level_for_score
from hsi_dagster.core.verdict.evidence import HIGH, MEDIUM, EvidenceRules, Floor
from hsi_dagster.core.visits.facts import VisitFacts, ordinal
from hsi_dagster.core.visits.linking import name_reason
from hsi_dagster.core.visits.sighting import Sighting

EARLIER_WINDOW = timedelta(hours=12)  # night hours are contiguous: two night visits 12 h apart are the same night
UNKNOWN_AT_NIGHT = " (a person not known at night)"
NIGHTS_WINDOW = timedelta(days=7)  # "this week": the repeat-nights rule looks this far back


@dataclass(frozen=True)
class VisitLevel:
    score: int
    level: str
    reasons: tuple[str, ...]


def _at_night(facts: VisitFacts, rules: EvidenceRules) -> VisitFacts:
    """The facts with only the sightings of a person not known in the night hours."""
    night = [s for s in facts.unknown_sightings if rules.is_night(s.local_hour)]
    return replace(facts, unknown_sightings=tuple(night))


def _substantial(facts: VisitFacts) -> bool:
    """2+ cameras, or an entry or private zone reached, by a person not known (night facts)."""
    reached = any(s.entry_zones or s.private_zones for s in facts.unknown_sightings)
    return len(facts.unknown_stops) >= 2 or reached


def night_names(sighting: Sighting, rules: EvidenceRules) -> frozenset[str]:
    """The plates ("plate:X") and re-identified names a sighting at night shows that are not the household's."""
    if not rules.is_night(sighting.local_hour):
        return frozenset()
    known = set(sighting.known_identities)
    return frozenset({f"plate:{p}" for p in sighting.plates} | set(sighting.identities)) - known


def _night(sighting: Sighting) -> tuple[date, str]:
    """(the night it belongs to: the local date 12 h earlier, "Mon 02:10")."""
    try:
        zone = ZoneInfo(sighting.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    local = sighting.start.astimezone(zone)
    return (local - timedelta(hours=12)).date(), f"{local:%a %H:%M}"


def repeat_nights(
    facts: VisitFacts, other_visits: Sequence[VisitFacts], rules: EvidenceRules
) -> tuple[int, str] | None:
    """The repeat-nights rule (see the table): (score, text) for the name seen on the most nights of the last
    NIGHTS_WINDOW, None below two nights."""
    mine = frozenset(name for s in facts.sightings for name in night_names(s, rules))
    if not mine:
        return None
    start = min(s.start for s in facts.sightings)
    sightings = sorted(
        (s for v in (*other_visits, facts) for s in v.sightings if start - NIGHTS_WINDOW <= s.start),
        key=lambda s: s.start,
    )
    best: tuple[int, str, dict[date, str]] | None = None
    for name in sorted(mine):
        nights: dict[date, str] = {}
        for s in sightings:
            if name in night_names(s, rules):
                night, when = _night(s)
                nights.setdefault(night, when)
        if len(nights) >= 2 and (best is None or len(nights) > best[0]):
            best = (len(nights), name, nights)
    if best is None:
        return None
    count, name, nights = best
    when = ", ".join(nights[night] for night in sorted(nights))
    return (HIGH if count >= 3 else MEDIUM), f"{ordinal(count)} night this week: {name_reason(name)} ({when})"


def visit_level(
    facts: VisitFacts,
    rules: EvidenceRules,
    earlier: Sequence[VisitFacts] = (),
    *,
    other_nights: Sequence[VisitFacts] = (),
) -> VisitLevel:
    """The visit's own floor from its facts, the site's earlier visits of the same night (storage reads those
    within EARLIER_WINDOW before it) and the visits sharing a plate or name over the last NIGHTS_WINDOW
    (`other_nights`; () when a household exception covers the pattern): 0 low when no visit rule fires."""
    night_facts = _at_night(facts, rules)
    stops = night_facts.unknown_stops if night_facts.stopped else ()  # only walked past: no visit rule
    fired: list[tuple[int, str]] = []  # (score, text with its "who" suffix)
    repeated = repeat_nights(facts, other_nights, rules) if other_nights else None
    if repeated is not None:
        on_property = _substantial(night_facts) or any(
            s.vehicle_on_property and rules.is_night(s.local_hour) for s in facts.sightings
        )
        score = repeated[0] if on_property else min(repeated[0], MEDIUM)
        fired.append((score, f"{repeated[1]} (not the household's)"))
    where = ", ".join(str(stop) for stop in stops)
    if len(stops) >= 3:
        text = f"{ordinal(len(stops))} camera in {night_facts.unknown_minutes} minutes: {where}"
        fired.append((HIGH, text + UNKNOWN_AT_NIGHT))
    elif len(stops) == 2:
        fired.append((MEDIUM, f"second camera in {night_facts.unknown_minutes} minutes: {where}{UNKNOWN_AT_NIGHT}"))
    cameras = [stop.camera_id for stop in stops]
    if len(stops) >= 2 and night_facts.reached_camera in cameras[1:]:
        before = ", ".join(cameras[: cameras.index(night_facts.reached_camera)])
        fired.append((HIGH, f"reached {night_facts.reached} after {before}{UNKNOWN_AT_NIGHT}"))
    if stops:
        tonight = [
            other
            for other in (_at_night(e, rules) for e in earlier)
            if other.visit_id != facts.visit_id
            and other.stopped  # someone who stopped: a passer-by earlier tonight is no first visit
            and (_substantial(other) or _substantial(night_facts))
        ]
        if tonight:
            first = tonight[0].unknown_sightings[0]
            fired.append(
                (
                    HIGH,
                    f"{ordinal(len(tonight) + 1)} visit tonight: {tonight[0].visit_id} at {first.local_time} "
                    f"({', '.join(str(stop) for stop in tonight[0].unknown_stops)}), now {where}{UNKNOWN_AT_NIGHT}",
                )
            )
    if not fired:
        return VisitLevel(0, level_for_score(0), ())
    score = max(score for score, _ in fired)
    reasons = tuple(
        f"visit {facts.visit_id}: {text} -> {s} {level_for_score(s)}"
        for s, text in sorted(fired, key=lambda item: -item[0])
    )
    return VisitLevel(score, level_for_score(score), reasons)


def raised_by_visit(floor: Floor, visit: VisitLevel) -> Floor:
    """The batch's floor, starting from its visit's level: a batch judged later in the visit is at least that."""
    if visit.score < MEDIUM:
        return floor
    if visit.score <= floor.score:  # named, not deciding
        return replace(floor, reasons=(*floor.reasons, *visit.reasons))
    score = visit.score
    return replace(floor, score=score, level=level_for_score(score), reasons=(*visit.reasons, *floor.reasons))
