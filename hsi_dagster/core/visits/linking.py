"""Linking a batch's sighting into a visit: one person's (or vehicle's) way around the site, across cameras.

Pure code (no Dagster, DuckDB or I/O); storage/visits.py reads the candidate visits and writes the choice.

- By time alone, with no camera graph: a sighting joins a visit when it starts within `gap_s` (+ `clock_skew_s`,
  cameras whose clocks disagree) of the visit's span, on either side (batches are judged out of order).
- Identity separates and strengthens: two different known identities (reid.known, household plates) are not one
  visit, however close in time; a shared identity or plate (known or not: the same re-identified stranger, the
  same unknown car) is a stronger link than time, and wins over a visit that only matches in time.
- Bounded: a visit never spans more than `max_span_s` nor holds more than `max_batches` batches; a sighting that
  would take it past either starts a new visit (the reason says which). A street party does not grow one visit
  without end.
- Times are UTC instants: a visit spans midnight and a partition boundary like any other minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from hsi_dagster.core.visits.sighting import Sighting

# The casing visit: looks 2 and 3 minutes apart on three cameras must be one visit. A look is a batch
# window (up to BATCH_WINDOW_SECONDS, 90 s) and the walk between cameras adds a minute or two, so the gap between
# one batch's last detection and the next one's first is up to ~3 minutes; 5 minutes links that with margin while
# a neighbour passing again a quarter of an hour later is a second visit.
DEFAULT_GAP_S = 300.0
DEFAULT_MAX_SPAN_S = 1800.0  # half an hour: longer is several visits (and "second visit tonight" evidence)
DEFAULT_MAX_BATCHES = 40
DEFAULT_CLOCK_SKEW_S = 30.0  # cameras on different detectors disagree by seconds, NTP-less ones by more


@dataclass(frozen=True)
class VisitRules:
    gap_s: float = DEFAULT_GAP_S
    max_span_s: float = DEFAULT_MAX_SPAN_S
    max_batches: int = DEFAULT_MAX_BATCHES
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S

    @classmethod
    def from_settings(cls, settings: Any) -> VisitRules:
        """The VISIT_* settings (HsiSettings, read by name: core never imports settings)."""
        return cls(
            gap_s=settings.VISIT_GAP_SECONDS,
            max_span_s=settings.VISIT_MAX_SPAN_SECONDS,
            max_batches=settings.VISIT_MAX_BATCHES,
            clock_skew_s=settings.VISIT_CLOCK_SKEW_SECONDS,
        )

    def __post_init__(self) -> None:
        if self.gap_s <= 0 or self.max_span_s <= 0 or self.clock_skew_s < 0:
            raise ValueError(
                f"VisitRules: need gap_s > 0, max_span_s > 0, clock_skew_s >= 0; got gap_s={self.gap_s}, "
                f"max_span_s={self.max_span_s}, clock_skew_s={self.clock_skew_s}"
            )
        if self.max_batches < 1:
            raise ValueError(f"VisitRules.max_batches must be at least 1, got {self.max_batches}")

    @property
    def reach(self) -> timedelta:
        """How far from a visit's span a sighting may start or end and still join it."""
        return timedelta(seconds=self.gap_s + self.clock_skew_s)


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


def new_visit(sighting: Sighting) -> Visit:
    """A visit of one sighting; its id is the first batch's, so a retry makes the same visit."""
    return Visit(f"visit:{sighting.batch_id}", (sighting,))


def with_sighting(visit: Visit, sighting: Sighting) -> Visit:
    """The visit with the sighting added (replacing the same batch's earlier sighting), in time order."""
    kept = [s for s in visit.sightings if s.batch_id != sighting.batch_id]
    return replace(visit, sightings=tuple(sorted([*kept, sighting], key=lambda s: (s.start, s.camera_id))))


def _refusal(visit: Visit, sighting: Sighting, rules: VisitRules) -> str | None:
    """Why the sighting cannot join this visit, None when it can."""
    if sighting.start > visit.last_ts + rules.reach or sighting.end < visit.first_ts - rules.reach:
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


def choose_visit(sighting: Sighting, candidates: Iterable[Visit], rules: VisitRules) -> Choice:
    """The visit the sighting joins (a shared identity or plate first, then the nearest in time), or None with why."""
    best: tuple[tuple[int, datetime], Visit, str] | None = None
    refusals: list[str] = []
    for visit in candidates:
        if sighting.batch_id in visit.batch_ids:
            return Choice(visit, f"already in {visit.visit_id}")
        refusal = _refusal(visit, sighting, rules)
        if refusal is not None:
            refusals.append(refusal)
            continue
        shared = sorted(sighting.names & visit.names)
        strength = (1 if shared else 0, visit.last_ts)
        why = f"same {shared[0]} as {visit.visit_id}" if shared else f"within {rules.gap_s:.0f} s of {visit.visit_id}"
        if best is None or strength > best[0]:
            best = (strength, visit, why)
    if best is not None:
        return Choice(best[1], best[2])
    return Choice(None, "new visit" + (f" ({'; '.join(refusals[:3])})" if refusals else ""))


def link(sighting: Sighting, candidates: Sequence[Visit], rules: VisitRules) -> tuple[Visit, str]:
    """The visit after linking the sighting (a new one, or a candidate with it added) and why."""
    choice = choose_visit(sighting, candidates, rules)
    if choice.visit is None:
        return new_visit(sighting), choice.why
    return with_sighting(choice.visit, sighting), choice.why
