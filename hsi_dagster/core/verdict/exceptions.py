"""Household exceptions: a pattern the household corrected as harmless often enough, within bounds. Pure code.

A corrected batch's pattern is its camera, its detector labels, its zones, its local two-hour band and the
identities a recogniser produced (a re-identified name with `known: true`, a plate read by LPR): structured,
closed-vocabulary facts only, never caption text. When at least `min_corrections` batches of one pattern were
corrected to `low` (each batch counted once), the pattern becomes an exception that expires `days` after its last
correction and can be removed (`hsi exceptions remove`); after a removal only newer corrections count again.

What an exception may touch is fixed here, not configurable: only the presence rules of the evidence floor
(EXEMPTIBLE_RULES: person or vehicle at night, loitering, unusual here). The weapon, violence, forcing, probing,
tool, watching, path-to-entry and after-an-alert rules are never exempt. A pattern with a person on an entry zone at
night and no recognised identity never becomes an exception: the household may mean the neighbour, an attacker
would mean himself. Exceptions are listed and explained (`explain`), and today they change no verdict: the floor
does not read them yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hsi_dagster.core.context.context_models import EnrichedContext

HOUR_BAND_HOURS = 2
EXEMPTIBLE_RULES = frozenset({"person at night", "vehicle or object at night", "loitering in the dark", "unusual here"})
NEVER_EXEMPT_RULES = frozenset(
    {"weapon", "violence", "forcing", "probing", "tool", "watching", "path to entry", "after an alert"}
)
MAX_EXCEPTIONS_PER_CAMERA = 20  # the most a camera can hold: a bound on what corrections can ever exempt


@dataclass(frozen=True)
class Pattern:
    """What makes two corrected batches "similar" (see the module docstring)."""

    camera_id: str
    labels: tuple[str, ...]
    zones: tuple[str, ...]
    hour_band: int  # the first local hour of the band (0, 2, ..., 22)
    identities: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        parts = (
            self.camera_id,
            ",".join(self.labels),
            ",".join(self.zones),
            str(self.hour_band),
            ",".join(self.identities),
        )
        return "|".join(parts)

    def describe(self) -> str:
        who = f", identity {', '.join(self.identities)}" if self.identities else ""
        zones = ", ".join(self.zones) or "no zone"
        band = f"{self.hour_band:02d}-{self.hour_band + HOUR_BAND_HOURS:02d}h"
        return f"{self.camera_id}: {', '.join(self.labels) or 'nothing'} on {zones}, {band}{who}"


@dataclass(frozen=True)
class HarmlessLabel:
    """One batch the household corrected to low, with its pattern and what the eligibility rule needs."""

    batch_id: str
    pattern: Pattern
    received_at: datetime
    unknown_person_at_entry_at_night: bool


@dataclass(frozen=True)
class ExceptionPolicy:
    min_corrections: int = 3
    days: float = 30.0

    @classmethod
    def from_settings(cls, settings: Any) -> ExceptionPolicy:
        """HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS, HOUSEHOLD_EXCEPTION_DAYS."""
        return cls(settings.HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS, settings.HOUSEHOLD_EXCEPTION_DAYS)


@dataclass(frozen=True)
class HouseholdException:
    pattern: Pattern
    corrections: int
    first_at: datetime
    last_at: datetime
    expires_at: datetime

    def explain(self) -> str:
        """The line a verdict's reasons would carry."""
        return (
            f"the household marked {self.corrections} similar events harmless ({self.pattern.describe()}); "
            f"exception until {self.expires_at:%Y-%m-%d}"
        )


@dataclass(frozen=True)
class Ineligible:
    """A pattern corrected often enough that may not become an exception, and why."""

    pattern: Pattern
    corrections: int
    reason: str


def local_hour(context: EnrichedContext) -> int:
    """The batch's local start hour (the context's `local_start`, in the camera's zone; UTC start otherwise)."""
    local = context.detections.local_start
    if local and len(local) >= 13 and local[11:13].isdigit():
        return int(local[11:13])
    return (context.detections.first_ts or context.batch.started_at).hour


def batch_pattern(context: EnrichedContext) -> Pattern:
    identities = {
        str(obs.fields["identity"])
        for obs in context.observations.get("reid", [])
        if obs.fields.get("known") is True and obs.fields.get("identity")
    }
    identities |= {plate for track in context.detections.tracks for plate in track.plates}
    return Pattern(
        camera_id=context.batch.camera_id,
        labels=tuple(sorted(context.detections.by_label)),
        zones=tuple(sorted(context.detections.zones)),
        hour_band=local_hour(context) // HOUR_BAND_HOURS * HOUR_BAND_HOURS,
        identities=tuple(sorted(identities)),
    )


def harmless_label(batch_id: str, context: EnrichedContext, received_at: datetime, is_night: bool) -> HarmlessLabel:
    """A correction to low as a label; `is_night` from the floor's own night hours (EvidenceRules.is_night)."""
    pattern = batch_pattern(context)
    entry = set(context.camera_profile.entry_zones) if context.camera_profile is not None else set()
    unknown_person = "person" in pattern.labels and not pattern.identities
    return HarmlessLabel(
        batch_id, pattern, received_at, unknown_person and bool(entry & set(pattern.zones)) and is_night
    )


def derive_exceptions(
    labels: Iterable[HarmlessLabel],
    removed: Mapping[str, datetime],
    now: datetime,
    policy: ExceptionPolicy,
) -> tuple[list[HouseholdException], list[Ineligible]]:
    """The exceptions in force at `now` (not expired; after a removal, only corrections received later count) and
    the patterns corrected often enough that the rules refuse; at most MAX_EXCEPTIONS_PER_CAMERA per camera, the
    most corrected first."""
    groups: dict[str, dict[str, HarmlessLabel]] = {}
    for label in labels:
        cut = removed.get(label.pattern.key)
        if cut is not None and label.received_at <= cut:
            continue
        batches = groups.setdefault(label.pattern.key, {})
        known = batches.get(label.batch_id)
        if known is None or label.received_at > known.received_at:  # one batch counts once
            batches[label.batch_id] = label
    exceptions: list[HouseholdException] = []
    refused: list[Ineligible] = []
    for batches in groups.values():
        items: Sequence[HarmlessLabel] = sorted(batches.values(), key=lambda item: item.received_at)
        if len(items) < policy.min_corrections:
            continue
        pattern = items[0].pattern
        if any(item.unknown_person_at_entry_at_night for item in items):
            refused.append(
                Ineligible(
                    pattern,
                    len(items),
                    "an unknown person at an entry zone at night: never exempt unless a recogniser named them",
                )
            )
            continue
        expires = items[-1].received_at + timedelta(days=policy.days)
        if expires <= now:
            continue
        exceptions.append(HouseholdException(pattern, len(items), items[0].received_at, items[-1].received_at, expires))
    exceptions.sort(key=lambda e: (e.pattern.camera_id, -e.corrections, e.pattern.key))
    kept: list[HouseholdException] = []
    per_camera: dict[str, int] = {}
    for exception in exceptions:
        count = per_camera.get(exception.pattern.camera_id, 0)
        if count < MAX_EXCEPTIONS_PER_CAMERA:
            kept.append(exception)
            per_camera[exception.pattern.camera_id] = count + 1
    return kept, refused


def exempts(exception: HouseholdException, pattern: Pattern, rule: str, now: datetime) -> bool:
    """Whether `exception` may lift `rule` for a batch of `pattern`: the same pattern, in force, a presence rule."""
    if rule in NEVER_EXEMPT_RULES or rule not in EXEMPTIBLE_RULES:
        return False
    return exception.pattern == pattern and now < exception.expires_at
