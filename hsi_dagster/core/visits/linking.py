"""Linking a batch's sighting into a visit: one person's (or vehicle's) way around the site, across cameras.

Pure code (no Dagster, DuckDB or I/O); storage/visits.py reads the candidate visits and writes the choice.

- By time alone, with no camera graph: a sighting joins a visit when it starts within `gap_s` (+ `clock_skew_s`,
  cameras whose clocks disagree) of the visit's span, on either side (batches are judged out of order).
- Identity separates and strengthens: two different known identities (reid.known, household plates) are not one
  visit, however close in time; a shared identity or plate (known or not: the same re-identified stranger, the
  same unknown car) is a stronger link than time, and wins over a visit that only matches in time.
- Known neighbours link further: two cameras the household says are adjacent (a camera profile's
  `approached_from`, a Frigate camera group: core/visits/adjacency.py) link within `gap_s * adjacent_factor`.
  Without a graph nothing changes: time alone, as above.
- An evidence-only alert (core/verdict/evidence_alerts.py) links its detections as a sighting with id
  `evidence:<alert key>`; the batch that later holds those detections replaces it in the same visit (`replaces`),
  so one set of detections is one sighting of one visit, whichever came first.
- Each link keeps a short reason (`Choice.reason`): "time", "neighbour front_door->side_gate", "camera group
  back", "plate AB12CDE", "reid stranger-7", "evidence alert <key>".
- Bounded: a visit never spans more than `max_span_s` nor holds more than `max_batches` batches; a sighting that
  would take it past either starts a new visit (the reason says which). A street party does not grow one visit
  without end.
- Times are UTC instants: a visit spans midnight and a partition boundary like any other minute.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from hsi_dagster.core.visits.adjacency import Adjacency
from hsi_dagster.core.visits.sighting import Sighting

# The casing visit: looks 2 and 3 minutes apart on three cameras must be one visit. A look is a batch
# window (up to BATCH_WINDOW_SECONDS, 90 s) and the walk between cameras adds a minute or two, so the gap between
# one batch's last detection and the next one's first is up to ~3 minutes; 5 minutes links that with margin while
# a neighbour passing again a quarter of an hour later is a second visit.
DEFAULT_GAP_S = 300.0
DEFAULT_MAX_SPAN_S = 1800.0  # half an hour: longer is several visits (and "second visit tonight" evidence)
DEFAULT_MAX_BATCHES = 40
DEFAULT_CLOCK_SKEW_S = 30.0  # cameras on different detectors disagree by seconds, NTP-less ones by more
# Two cameras the household calls adjacent (a profile's `approached_from`, a Frigate camera group) link within twice
# the gap: the walk between them passes no other camera, so a person who waits out of view between them (behind the
# hedge between the driveway and the side gate, 5 to 10 minutes) is still the one visit; and the graph says where
# that person can come from, so the chance that someone else arrives from exactly that neighbour within 10 minutes
# at night is small. More than twice would let a neighbour passing again a quarter of an hour later join the visit.
DEFAULT_ADJACENT_FACTOR = 2.0
EVIDENCE_PREFIX = "evidence:"  # the sighting id of an evidence-only alert: f"evidence:{alert_key}"
TIME = "time"


@dataclass(frozen=True)
class VisitRules:
    gap_s: float = DEFAULT_GAP_S
    max_span_s: float = DEFAULT_MAX_SPAN_S
    max_batches: int = DEFAULT_MAX_BATCHES
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S
    adjacency: Adjacency = field(default_factory=Adjacency)
    adjacent_factor: float = DEFAULT_ADJACENT_FACTOR

    @classmethod
    def from_settings(cls, settings: Any, *, adjacency: Adjacency | None = None) -> VisitRules:
        """The VISIT_* settings (HsiSettings, read by name: core never imports settings), and the site's camera
        adjacency when known."""
        return cls(
            gap_s=settings.VISIT_GAP_SECONDS,
            max_span_s=settings.VISIT_MAX_SPAN_SECONDS,
            max_batches=settings.VISIT_MAX_BATCHES,
            clock_skew_s=settings.VISIT_CLOCK_SKEW_SECONDS,
            adjacency=adjacency if adjacency is not None else Adjacency(),
        )

    def __post_init__(self) -> None:
        if self.gap_s <= 0 or self.max_span_s <= 0 or self.clock_skew_s < 0:
            raise ValueError(
                f"VisitRules: need gap_s > 0, max_span_s > 0, clock_skew_s >= 0; got gap_s={self.gap_s}, "
                f"max_span_s={self.max_span_s}, clock_skew_s={self.clock_skew_s}"
            )
        if self.adjacent_factor < 1:
            raise ValueError(f"VisitRules.adjacent_factor must be at least 1, got {self.adjacent_factor}")
        if self.max_batches < 1:
            raise ValueError(f"VisitRules.max_batches must be at least 1, got {self.max_batches}")

    @property
    def reach(self) -> timedelta:
        """How far from a visit's span a sighting may start or end and still join it."""
        return timedelta(seconds=self.gap_s + self.clock_skew_s)

    @property
    def adjacent_reach(self) -> timedelta:
        """How far a sighting on a camera adjacent to one of the visit's may be and still join it."""
        return timedelta(seconds=self.gap_s * self.adjacent_factor + self.clock_skew_s)

    @property
    def widest_reach(self) -> timedelta:
        """The reach storage reads candidates within: the adjacent one when a graph is known."""
        return self.adjacent_reach if self.adjacency else self.reach


@dataclass(frozen=True)
class Visit:
    """A visit: its sightings in time order (one per batch), and the level its own evidence reached."""

    visit_id: str
    sightings: tuple[Sighting, ...]
    score: int = 0
    level: str = "low"
    reasons: tuple[str, ...] = ()

    @property
    def first_ts(self) -> datetime:
        return min(s.start for s in self.sightings)

    @property
    def last_ts(self) -> datetime:
        return max(s.end for s in self.sightings)

    @property
    def batch_ids(self) -> tuple[str, ...]:
        return tuple(s.batch_id for s in self.sightings)

    @property
    def cameras(self) -> tuple[str, ...]:
        """Cameras in the order the visit reached them."""
        return tuple(dict.fromkeys(s.camera_id for s in self.sightings))

    @property
    def known_identities(self) -> frozenset[str]:
        return frozenset(name for s in self.sightings for name in s.known_identities)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for s in self.sightings for name in s.names)

    @property
    def unknown(self) -> bool:
        return any(s.unknown for s in self.sightings)

    @property
    def span_s(self) -> float:
        return (self.last_ts - self.first_ts).total_seconds()


@dataclass(frozen=True)
class Choice:
    visit: Visit | None  # None: the sighting starts a new visit
    why: str
    reason: str = ""  # the link's short reason ("time", "neighbour a->b", "plate X", "reid Y"); "" for a new visit


def new_visit(sighting: Sighting) -> Visit:
    """A visit of one sighting; its id is the first batch's, so a retry makes the same visit."""
    return Visit(f"visit:{sighting.batch_id}", (sighting,))


def with_sighting(visit: Visit, sighting: Sighting, *, replaces: Collection[str] = ()) -> Visit:
    """The visit with the sighting added (replacing the same batch's earlier sighting, and the sightings in
    `replaces`: evidence-only alerts on the same detections), in time order."""
    dropped = {sighting.batch_id, *replaces}
    kept = [s for s in visit.sightings if s.batch_id not in dropped]
    return replace(visit, sightings=tuple(sorted([*kept, sighting], key=lambda s: (s.start, s.camera_id))))


def _near(a: Sighting, b: Sighting, reach: timedelta) -> bool:
    return not (a.start > b.end + reach or a.end < b.start - reach)


def _neighbour(visit: Visit, sighting: Sighting, rules: VisitRules) -> str | None:
    """The adjacency reason linking the sighting to one of the visit's sightings within the adjacent reach."""
    if not rules.adjacency:
        return None
    for other in reversed(visit.sightings):
        reason = rules.adjacency.reason(other.camera_id, sighting.camera_id)
        if reason is not None and _near(sighting, other, rules.adjacent_reach):
            return reason
    return None


def _refusal(visit: Visit, sighting: Sighting, rules: VisitRules, neighbour: str | None = None) -> str | None:
    """Why the sighting cannot join this visit, None when it can."""
    far = sighting.start > visit.last_ts + rules.reach or sighting.end < visit.first_ts - rules.reach
    if far and neighbour is None:
        return f"more than {rules.gap_s:.0f} s from {visit.visit_id}"
    if len(visit.sightings) >= rules.max_batches:
        return f"{visit.visit_id} is full ({rules.max_batches} batches, VISIT_MAX_BATCHES)"
    span = (max(visit.last_ts, sighting.end) - min(visit.first_ts, sighting.start)).total_seconds()
    if span > rules.max_span_s:
        return f"{visit.visit_id} would span {span:.0f} s (> VISIT_MAX_SPAN_SECONDS {rules.max_span_s:.0f})"
    mine, theirs = frozenset(sighting.known_identities), visit.known_identities
    if mine and theirs and not mine & theirs:
        return f"different known people ({', '.join(sorted(mine))} / {', '.join(sorted(theirs))})"
    return None


def name_reason(name: str) -> str:
    """ "plate AB12CDE" for a plate, "reid <identity>" for a re-identification."""
    return f"plate {name.removeprefix('plate:')}" if name.startswith("plate:") else f"reid {name}"


def choose_visit(
    sighting: Sighting, candidates: Iterable[Visit], rules: VisitRules, *, replaces: Collection[str] = ()
) -> Choice:
    """The visit the sighting joins (the visit of an evidence-only alert on the same detections, in `replaces`,
    first; then a shared identity or plate; then a known neighbour camera; then the nearest in time), or None with
    why."""
    best: tuple[tuple[int, int, datetime], Visit, str, str] | None = None
    refusals: list[str] = []
    replaced = set(replaces)
    for visit in candidates:
        if sighting.batch_id in visit.batch_ids:
            return Choice(visit, f"already in {visit.visit_id}", "already linked")
        same_detections = sorted(replaced & set(visit.batch_ids))
        if same_detections:  # whatever the bounds: the same detections are one visit
            key = same_detections[0].removeprefix(EVIDENCE_PREFIX)
            return Choice(
                visit, f"same detections as {same_detections[0]} in {visit.visit_id}", f"evidence alert {key}"
            )
        neighbour = _neighbour(visit, sighting, rules)
        refusal = _refusal(visit, sighting, rules, neighbour)
        if refusal is not None:
            refusals.append(refusal)
            continue
        shared = sorted(sighting.names & visit.names)
        strength = (1 if shared else 0, 1 if neighbour else 0, visit.last_ts)
        if shared:
            why, reason = f"same {shared[0]} as {visit.visit_id}", name_reason(shared[0])
        elif neighbour:
            reach = rules.adjacent_reach.total_seconds() - rules.clock_skew_s
            why, reason = f"{neighbour}: within {reach:.0f} s of {visit.visit_id}", neighbour
        else:
            why, reason = f"within {rules.gap_s:.0f} s of {visit.visit_id}", TIME
        if best is None or strength > best[0]:
            best = (strength, visit, why, reason)
    if best is not None:
        return Choice(best[1], best[2], best[3])
    return Choice(None, "new visit" + (f" ({'; '.join(refusals[:3])})" if refusals else ""))


def covering_batch(visit: Visit, sighting: Sighting) -> Sighting | None:
    """For an evidence-only alert's sighting: the visit's batch sighting on the same camera whose span holds it (the
    batch was linked first: its detections are already in the visit)."""
    if not sighting.batch_id.startswith(EVIDENCE_PREFIX):
        return None
    return next(
        (
            s
            for s in visit.sightings
            if not s.batch_id.startswith(EVIDENCE_PREFIX)
            and s.camera_id == sighting.camera_id
            and s.start <= sighting.start
            and sighting.end <= s.end
        ),
        None,
    )


def link_choice(
    sighting: Sighting, candidates: Sequence[Visit], rules: VisitRules, *, replaces: Collection[str] = ()
) -> tuple[Visit, Choice]:
    """The visit after linking the sighting and the choice made (with its short reason)."""
    choice = choose_visit(sighting, candidates, rules, replaces=replaces)
    if choice.visit is None:
        return new_visit(sighting), choice
    if choice.reason != "already linked" and covering_batch(choice.visit, sighting) is not None:
        return choice.visit, choice  # its detections are in the visit already, as the batch's sighting
    return with_sighting(choice.visit, sighting, replaces=replaces), choice


def link(
    sighting: Sighting, candidates: Sequence[Visit], rules: VisitRules, *, replaces: Collection[str] = ()
) -> tuple[Visit, str]:
    """The visit after linking the sighting (a new one, or a candidate with it added) and why."""
    visit, choice = link_choice(sighting, candidates, rules, replaces=replaces)
    return visit, choice.why
