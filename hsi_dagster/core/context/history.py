"""What a camera usually sees at this hour, and what the other cameras saw just before: the history facts.

Pure code (no Dagster, DuckDB or I/O). `storage/history.py` runs the SQL and returns `HistoryInputs` (plain rows);
`history_facts` turns them into `HistoryFacts`, which the prompt renders (two sections, core/prompt/messages.py) and the
evidence floor reads (core/verdict/evidence.py). The evaluation builds the same `HistoryInputs` from a scenario's JSON
(`core/evaluation/scenario_history.py`) and calls the same `history_facts`, so `hsi eval` measures what production
computes.

Rules (the choices the prompt and the floor rely on):
- Baseline: for each label of the batch, on how many of the last `days` local days (the days before the batch's
  own local day, so a batch never counts itself) this camera saw that label in the batch's local hour. A day on
  which the camera recorded nothing at all is not "observed" (offline, or the camera did not exist yet): the
  denominator is the days with any detection. The local hour is the camera profile's time zone; a profile without
  one (or no profile) is read as UTC and the facts say so.
- Enough history: at least `min_days` observed days and a consistent clock. Without it `enough_history` is False,
  nothing is called unusual, and the section and `assumptions` say why (a new camera is not "unusual" everywhere).
- Unusual: a batch label seen on at most `unusual_max_fraction` of the observed days in this hour (default 0.1:
  0 or 1 of 14 days).
- Clock gone back: detections stored before this batch's arrived yet stamped more than an hour after its start
  mean the camera's clock was set back (or forward, then fixed). The days cannot be trusted: not enough history.
- A camera renamed mid-history: the profile's `former_camera_ids` are counted as this camera; without them the
  new id is a new camera (little history, said so).
- Cross-camera activity: stored detections of the other cameras in the `cross_camera_minutes` before the batch's
  start, one event per (camera, batch), in time order, with that batch's stored verdict when there is one; the
  latest `max_events` are kept.
- Path to an entry point: the profiles' optional `approached_from` relations (back_door approached from driveway,
  driveway from street) read as a directed graph; `path_to_entry` is the longest chain of cameras, each with
  activity later than the one before it, that ends at this camera (street -> driveway -> back_door), or () when no
  other camera of the chain saw anything. `camera_is_entry_point` says whether this camera is marked as one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

CLOCK_JUMP_TOLERANCE_S = 3600.0  # later stamps than this, stored before the batch arrived: the clock went back


@dataclass(frozen=True)
class LabelBaseline:
    label: str
    days_seen: int  # of the last `days_observed` days, how many had this label on this camera in this local hour
    days_observed: int


@dataclass(frozen=True)
class CrossCameraEvent:
    camera_id: str
    ts: datetime
    labels: tuple[str, ...]
    risk_level: str | None  # that batch's stored verdict, when there is one
    seconds_before: float  # before this batch's start


@dataclass(frozen=True)
class HistoryFacts:
    camera_id: str
    timezone: str
    local_hour: int
    assumptions: tuple[str, ...]  # e.g. "no time zone in the profile: UTC assumed", "new camera: 2 days of history"
    days_observed: int
    enough_history: bool  # False: nothing is called unusual
    baselines: tuple[LabelBaseline, ...]
    unusual_labels: tuple[str, ...]  # batch labels rare at this hour on this camera (only when enough_history)
    recent_activity: tuple[CrossCameraEvent, ...]  # other cameras, in time order
    path_to_entry: tuple[str, ...]  # camera ids along the profile's neighbour path ending here, () if none
    # extra fields (interface: "extra fields may be added; these stay")
    days_requested: int = 0  # HISTORY_DAYS
    camera_is_entry_point: bool = False  # the profile marks this camera as watching an entry (door, gate, window)
    cross_camera_minutes: float = 0.0

    @property
    def hour_text(self) -> str:
        return f"{self.local_hour:02d}:00-{(self.local_hour + 1) % 24:02d}:00"


@dataclass(frozen=True)
class HistoryRules:
    """Settings HISTORY_* (settings.py); defaults for tests and the evaluation."""

    days: int = 14
    min_days: int = 7
    unusual_max_fraction: float = 0.1
    cross_camera_minutes: float = 10.0
    max_events: int = 12

    @property
    def keep_days(self) -> int:
        """Days of the activity aggregate kept (retention) and re-derived (camera_baselines): the window + margin."""
        return self.days + 2

    @classmethod
    def from_settings(cls, settings: Any) -> HistoryRules:
        """From HsiSettings' HISTORY_* values (duck-typed: core does not import the settings)."""
        return cls(
            days=settings.HISTORY_DAYS,
            min_days=settings.HISTORY_MIN_DAYS,
            unusual_max_fraction=settings.HISTORY_UNUSUAL_MAX_FRACTION,
            cross_camera_minutes=settings.HISTORY_CROSS_CAMERA_MINUTES,
        )


# ----------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class DayActivity:
    """One local day before the batch's on which the camera recorded anything (days without are absent)."""

    days_ago: int  # 1 = the local day before the batch's
    labels_in_hour: tuple[str, ...]  # labels seen that day in the batch's local hour


@dataclass(frozen=True)
class RecentActivity:
    """One other camera's batch (or not yet batched detections) in the minutes before this batch."""

    camera_id: str
    ts: datetime  # its first detection in the window
    labels: tuple[str, ...]
    risk_level: str | None


@dataclass(frozen=True)
class HistoryInputs:
    """The plain inputs of `history_facts`: what storage/history.py returns, or a scenario's `history` JSON."""

    camera_id: str
    batch_start: datetime
    batch_labels: tuple[str, ...]
    timezone: str | None  # the profile's; None = not given
    days_requested: int
    days: tuple[DayActivity, ...] = ()
    recent: tuple[RecentActivity, ...] = ()
    clock_jump_s: float | None = None  # see CLOCK_JUMP_TOLERANCE_S; None = none found
    former_camera_ids: tuple[str, ...] = ()
    approached_from: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # camera -> cameras before it
    entry_points: tuple[str, ...] = ()


@dataclass(frozen=True)
class DayWindow:
    """UTC bounds of one local day and of the batch's local hour on it (storage queries these)."""

    days_ago: int
    day_start: datetime
    day_end: datetime
    hour_start: datetime
    hour_end: datetime


def resolve_zone(name: str | None) -> tuple[ZoneInfo, str | None]:
    """The zone to use and, when it is not the one asked for, the assumption made."""
    if not name:
        return ZoneInfo("UTC"), "no time zone in the camera profile: UTC assumed"
    try:
        return ZoneInfo(name), None
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC"), f"unknown time zone {name!r}: UTC assumed"


def as_utc(ts: datetime) -> datetime:
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).astimezone(UTC)


def day_windows(batch_start: datetime, timezone: str | None, days: int) -> list[DayWindow]:
    """The `days` local days before the batch's local day, each with its UTC bounds and the batch's local hour."""
    tz, _ = resolve_zone(timezone)
    local = as_utc(batch_start).astimezone(tz)
    windows = []
    for ago in range(1, days + 1):
        day: date = local.date() - timedelta(days=ago)
        start = datetime.combine(day, time(0), tz)
        end = datetime.combine(day + timedelta(days=1), time(0), tz)
        hour = datetime.combine(day, time(local.hour), tz)
        windows.append(DayWindow(ago, as_utc(start), as_utc(end), as_utc(hour), as_utc(hour + timedelta(hours=1))))
    return windows


def approach_relations(profiles: Mapping[str, Any]) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """(camera -> cameras it is approached from, entry-point cameras) from the camera profiles."""
    approached = {cid: tuple(p.approached_from) for cid, p in profiles.items() if getattr(p, "approached_from", ())}
    entries = tuple(sorted(cid for cid, p in profiles.items() if getattr(p, "entry_point", False)))
    return approached, entries


def profile_timezone(profile: Any) -> str | None:
    """The profile's time zone only when the operator wrote one (CameraProfile defaults to UTC silently)."""
    if profile is None or "timezone" not in getattr(profile, "model_fields_set", ()):
        return None
    return str(profile.timezone)


# ----------------------------------------------------------------------------------------------- facts
def _path_to_entry(
    camera_id: str, start: datetime, events: Sequence[CrossCameraEvent], approached: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """Longest chain of cameras ending here, each seen before the next (latest sighting per camera: optimal)."""

    def chain(camera: str, before: datetime, visited: frozenset[str]) -> tuple[str, ...]:
        best: tuple[str, ...] = ()
        for previous in approached.get(camera, ()):
            if previous in visited:
                continue
            seen = [e.ts for e in events if e.camera_id == previous and e.ts <= before]
            if seen:
                candidate = chain(previous, max(seen), visited | {previous})
                if len(candidate) + 1 > len(best):
                    best = (*candidate, previous)
        return best

    path = chain(camera_id, start, frozenset({camera_id}))
    return (*path, camera_id) if path else ()


def history_facts(inputs: HistoryInputs, rules: HistoryRules = HistoryRules()) -> HistoryFacts:
    """Baselines, unusual labels and cross-camera activity of one batch, with every assumption made said."""
    tz, zone_note = resolve_zone(inputs.timezone)
    start = as_utc(inputs.batch_start)
    assumptions = [zone_note] if zone_note else []
    days = {d.days_ago: d for d in inputs.days if 1 <= d.days_ago <= inputs.days_requested}
    observed = len(days)
    if inputs.former_camera_ids:
        assumptions.append("history of former camera ids counted: " + ", ".join(inputs.former_camera_ids))
    clock_ok = inputs.clock_jump_s is None or inputs.clock_jump_s <= CLOCK_JUMP_TOLERANCE_S
    if not clock_ok:
        hours = (inputs.clock_jump_s or 0) / 3600
        assumptions.append(
            f"camera clock went back: detections stored before this batch arrived are stamped up to {hours:.1f} h "
            "after it; the baseline is not used"
        )
    if observed == 0:
        assumptions.append(f"no history: nothing stored for this camera in the {inputs.days_requested} days before")
    elif observed < rules.min_days:
        assumptions.append(
            f"new camera or little history: {observed} of the last {inputs.days_requested} days recorded anything "
            f"(at least {rules.min_days} needed); nothing is called unusual"
        )
    elif observed < inputs.days_requested:
        assumptions.append(
            f"{inputs.days_requested - observed} of the last {inputs.days_requested} days recorded nothing "
            "(camera off?) and are not counted"
        )
    enough = clock_ok and observed >= rules.min_days
    labels = sorted(set(inputs.batch_labels))
    baselines = tuple(
        LabelBaseline(label, sum(label in d.labels_in_hour for d in days.values()), observed) for label in labels
    )
    unusual = tuple(
        b.label for b in baselines if enough and b.days_seen <= math.floor(rules.unusual_max_fraction * observed)
    )
    own = {inputs.camera_id, *inputs.former_camera_ids}
    window = timedelta(minutes=rules.cross_camera_minutes)
    events = sorted(
        (
            CrossCameraEvent(
                r.camera_id,
                as_utc(r.ts),
                tuple(sorted(set(r.labels))),
                r.risk_level,
                round((start - as_utc(r.ts)).total_seconds(), 1),
            )
            for r in inputs.recent
            if r.camera_id not in own and start - window <= as_utc(r.ts) <= start
        ),
        key=lambda e: (e.ts, e.camera_id),
    )[-rules.max_events :]
    return HistoryFacts(
        camera_id=inputs.camera_id,
        timezone=str(tz.key),
        local_hour=start.astimezone(tz).hour,
        assumptions=tuple(assumptions),
        days_observed=observed,
        enough_history=enough,
        baselines=baselines,
        unusual_labels=unusual,
        recent_activity=tuple(events),
        path_to_entry=_path_to_entry(inputs.camera_id, start, events, inputs.approached_from),
        days_requested=inputs.days_requested,
        camera_is_entry_point=inputs.camera_id in inputs.entry_points,
        cross_camera_minutes=rules.cross_camera_minutes,
    )


# ----------------------------------------------------------------------------------------------- daily summary
def usual_hours(
    buckets: Iterable[tuple[datetime, str]], timezone: str | None, *, now: datetime, days: int
) -> tuple[int, dict[str, tuple[int, ...]]]:
    """(days with any activity, label -> local hours it was seen in on at least half of those days) over the
    `days` local days before `now`'s: what the `camera_baselines` asset shows per camera."""
    tz, _ = resolve_zone(timezone)
    today = as_utc(now).astimezone(tz).date()
    seen: dict[tuple[str, int], set[date]] = {}
    active: set[date] = set()
    for start, label in buckets:
        local = as_utc(start).astimezone(tz)
        if not 1 <= (today - local.date()).days <= days:
            continue
        active.add(local.date())
        seen.setdefault((label, local.hour), set()).add(local.date())
    usual: dict[str, list[int]] = {}
    for (label, hour), dates in sorted(seen.items()):
        if active and len(dates) >= len(active) / 2:
            usual.setdefault(label, []).append(hour)
    return len(active), {label: tuple(hours) for label, hours in usual.items()}


def hours_text(hours: Sequence[int]) -> str:
    """(7, 8, 9, 17, 23) -> '07-10, 17-18, 23-24' (local hour ranges)."""
    ranges: list[list[int]] = []
    for hour in sorted(hours):
        if ranges and ranges[-1][1] == hour:
            ranges[-1][1] = hour + 1
        else:
            ranges.append([hour, hour + 1])
    return ", ".join(f"{lo:02d}-{hi:02d}" for lo, hi in ranges)
