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
would mean himself (whether the zone is an entry is the floor's own reading: the profile's roles, else the roles
guessed from the zone names; core/verdict/evidence.py `unknown_person_at_entry_at_night`). Exceptions are listed,
and the evidence floor lifts the presence rules of a batch of an exception's pattern, saying so in its reasons
(`explain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.patterns import HOUR_BAND_HOURS, Pattern, batch_pattern, local_hour

__all__ = ["HOUR_BAND_HOURS", "Pattern", "batch_pattern", "local_hour"]  # the pattern is core/context/patterns.py's
EXEMPTIBLE_RULES = frozenset({"person at night", "vehicle or object at night", "loitering in the dark", "unusual here"})
NEVER_EXEMPT_RULES = frozenset(
    {"weapon", "violence", "forcing", "probing", "tool", "watching", "path to entry", "after an alert"}
)
MAX_EXCEPTIONS_PER_CAMERA = 20  # the most a camera can hold: a bound on what corrections can ever exempt


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
        """The line a verdict's reasons carry when this exception lifted a rule (and `hsi exceptions` shows)."""
        return (
            f"the household marked {self.corrections} similar events harmless ({self.pattern.describe()}): "
            f"exception {self.pattern.key}, expires {self.expires_at:%Y-%m-%d}"
        )


@dataclass(frozen=True)
class Ineligible:
    """A pattern corrected often enough that may not become an exception, and why."""

    pattern: Pattern
    corrections: int
    reason: str


def harmless_label(
    batch_id: str, context: EnrichedContext, received_at: datetime, unknown_person_at_entry_at_night: bool
) -> HarmlessLabel:
    """A correction to low as a label; the flag is the floor's own reading of the batch
    (core/verdict/evidence.py `unknown_person_at_entry_at_night`: its night hours, zone roles and "known")."""
    pattern = batch_pattern(context)
    return HarmlessLabel(batch_id, pattern, received_at, unknown_person_at_entry_at_night and not pattern.identities)


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
        if label.received_at > now:  # not received yet at `now` (a replay of an earlier verdict)
            continue
        cut = removed.get(label.pattern.key)
        if cut is not None and cut <= now and label.received_at <= cut:
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


def exception_for(
    exceptions: Iterable[HouseholdException], pattern: Pattern, now: datetime
) -> HouseholdException | None:
    """The exception in force at `now` for a batch of `pattern` (the same pattern exactly), or None."""
    return next((e for e in exceptions if e.pattern == pattern and now < e.expires_at), None)
