"""Batch windows per camera (contract section 2): a pure function of the detections, so replays agree.

Rules, per camera, over detections ordered by (ts, detection_id):
- a regular batch opens at the first detection not yet in a batch (`started_at = ts`);
- a detection joins it iff `ts - started_at < window` AND `ts < idle_until` (strict), else it closes the batch and
  opens the next one; `idle_until = last_ts + idle`, or later while the batch holds a tracked object its source
  still reports (`tracking` True, e.g. a Frigate `new`/`update`): `held_ts + track_hold`, `held_ts` the latest
  detection of such a track (its `end`, `tracking` False, releases it). Frigate reports a stationary object once
  a minute, so a person standing at the door stays one batch up to the window instead of one per update;
- `closes_at = min(started_at + window, idle_until)`, `close_reason` = `window` on a tie, else `idle`;
- a fast-path detection (label in FAST_PATH_LABELS, confidence >= FAST_PATH_CONFIDENCE) is a batch of its own,
  closed at its ts, and neither joins, extends nor closes the regular batch.
No DuckDB and no Dagster here: `hsi_dagster.storage.batches` feeds it rows and records the results.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

CLOSE_WINDOW = "window"
CLOSE_IDLE = "idle"
CLOSE_FAST_PATH = "fast_path"
OPEN = "open"


@dataclass(frozen=True, slots=True)
class DetectionRef:
    """What batching needs to know about a detection."""

    detection_id: str
    camera_id: str
    ts: datetime
    label: str
    confidence: float
    track_id: str | None = None
    tracking: bool | None = None  # the source still tracks the object after this (True), ended it (False), or None


@dataclass(frozen=True)
class BatchRules:
    """The tunables of section 2; `from_settings` reads the BATCH_*/FAST_PATH_* settings."""

    window_seconds: float = 90
    idle_timeout_seconds: float = 30
    fast_path_labels: frozenset[str] = frozenset({"person"})
    fast_path_confidence: float = 0.90
    track_hold_seconds: float = 65  # Frigate updates a tracked object at least once a minute; 0 = no hold

    def __post_init__(self) -> None:
        if not self.window_seconds > 0 or not self.idle_timeout_seconds > 0:
            raise ValueError("window_seconds and idle_timeout_seconds must be > 0")
        if not self.track_hold_seconds >= 0:
            raise ValueError("track_hold_seconds must be >= 0")
        object.__setattr__(self, "fast_path_labels", frozenset(self.fast_path_labels))

    @classmethod
    def from_settings(cls, settings: Any) -> BatchRules:
        return cls(
            window_seconds=float(settings.BATCH_WINDOW_SECONDS),
            idle_timeout_seconds=float(settings.BATCH_IDLE_TIMEOUT_SECONDS),
            fast_path_labels=frozenset(settings.FAST_PATH_LABELS),
            fast_path_confidence=float(settings.FAST_PATH_CONFIDENCE),
            track_hold_seconds=float(settings.BATCH_TRACK_HOLD_SECONDS),
        )

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)

    @property
    def idle(self) -> timedelta:
        return timedelta(seconds=self.idle_timeout_seconds)

    @property
    def track_hold(self) -> timedelta:
        return timedelta(seconds=self.track_hold_seconds)

    def is_fast_path(self, detection: DetectionRef) -> bool:
        return detection.label in self.fast_path_labels and detection.confidence >= self.fast_path_confidence


@dataclass(frozen=True)
class Batch:
    """One batch window. `trailing` marks the last regular batch of a camera in the input it was built from:
    no later detection has closed it, so only the clock (`as_of >= closes_at`) can."""

    batch_id: str
    camera_id: str
    started_at: datetime
    last_ts: datetime
    closes_at: datetime
    close_reason: str  # window | idle | fast_path
    detection_ids: tuple[str, ...]
    labels: tuple[str, ...]
    trailing: bool = False

    @property
    def detection_count(self) -> int:
        return len(self.detection_ids)

    @property
    def is_fast_path(self) -> bool:
        return self.close_reason == CLOSE_FAST_PATH

    def closed(self, as_of: datetime) -> bool:
        """Closed as of `as_of` (section 2): the clock passed closes_at, or a later detection opened the next batch."""
        return is_closed(self, as_of, later_exists=not self.trailing)


_UNSAFE_DOTS = re.compile(r"\.{3,}")


def make_batch_id(camera_id: str, first: DetectionRef) -> str:
    """`<camera>__<first ts UTC>__<8 hex of sha256(camera, first detection_id)>`, at most 99 characters.

    Deterministic and readable; a valid Dagster partition key (no `...`, commas, slashes or control chars).
    """
    camera = camera_key(camera_id)
    t = first.ts.astimezone(UTC)
    ts = f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}.{t.microsecond:06d}Z"
    digest = hashlib.sha256(f"{camera_id}\x00{first.detection_id}".encode()).hexdigest()[:8]
    return f"{camera}__{ts}__{digest}"


def batch_id_camera_prefix(batch_id: str) -> str:
    """The camera part of a batch_id (after the `...` escape): compare with `camera_key(camera_id)`."""
    return batch_id.rsplit("__", 2)[0]


def camera_key(camera_id: str) -> str:
    """How a camera_id appears at the start of its batch ids."""
    if "..." not in camera_id:
        return camera_id
    return _UNSAFE_DOTS.sub(lambda m: "_" * len(m.group()), camera_id)


def _sort_key(detection: DetectionRef) -> tuple[datetime, str]:
    return (detection.ts, detection.detection_id)


class _OpenBatch:
    """The regular batch being filled: its members, and the tracks it holds open (track -> latest report)."""

    def __init__(self, first: DetectionRef, rules: BatchRules) -> None:
        self.rules = rules
        self.members: list[DetectionRef] = []
        self.started = first.ts
        self.last = first.ts
        self.held: dict[str, datetime] = {}  # tracks still reported: their latest detection here
        self.ended: dict[str, datetime] = {}  # tracks whose end is here: a report at the same instant is no hold
        self.add(first)

    def add(self, detection: DetectionRef) -> None:
        self.members.append(detection)
        self.last = detection.ts
        track = detection.track_id
        if track is None or detection.tracking is None:
            return
        if detection.tracking is False:
            self.ended[track] = max(detection.ts, self.ended.get(track, detection.ts))
            self.held.pop(track, None)
        elif track not in self.ended or detection.ts > self.ended[track]:
            self.ended.pop(track, None)
            self.held[track] = detection.ts

    @property
    def idle_until(self) -> datetime:
        """`last_ts + idle`, later while a still-reported track's next report is due (module docstring)."""
        until = self.last + self.rules.idle
        if self.held and self.rules.track_hold_seconds > 0:
            until = max(until, max(self.held.values()) + self.rules.track_hold)
        return until

    def admits(self, detection: DetectionRef) -> bool:
        return detection.ts - self.started < self.rules.window and detection.ts < self.idle_until

    def batch(self, *, trailing: bool) -> Batch:
        by_window, by_idle = self.started + self.rules.window, self.idle_until
        closes_at, reason = (by_window, CLOSE_WINDOW) if by_window <= by_idle else (by_idle, CLOSE_IDLE)
        return _batch(self.members, closes_at, reason, trailing=trailing)


def _batch(members: list[DetectionRef], closes_at: datetime, reason: str, *, trailing: bool) -> Batch:
    first, last = members[0], members[-1]
    return Batch(
        batch_id=make_batch_id(first.camera_id, first),
        camera_id=first.camera_id,
        started_at=first.ts,
        last_ts=last.ts,
        closes_at=closes_at,
        close_reason=reason,
        detection_ids=tuple(d.detection_id for d in members),
        labels=tuple(d.label for d in members),
        trailing=trailing,
    )


def _camera_batches(detections: list[DetectionRef], rules: BatchRules) -> list[Batch]:
    batches: list[Batch] = []
    current: _OpenBatch | None = None
    for detection in detections:
        if rules.is_fast_path(detection):
            batches.append(_batch([detection], detection.ts, CLOSE_FAST_PATH, trailing=False))
            continue
        if current is not None and current.admits(detection):
            current.add(detection)
            continue
        if current is not None:
            batches.append(current.batch(trailing=False))
        current = _OpenBatch(detection, rules)
    if current is not None:
        batches.append(current.batch(trailing=True))
    return batches


def assign_batches(detections: Iterable[DetectionRef], rules: BatchRules) -> list[Batch]:
    """All batches of the given detections (any cameras, any arrival order), ordered by (started_at, batch_id).

    The last regular batch of each camera comes back with `trailing=True`; whether it is closed depends on the
    clock (`Batch.closed(as_of)`).
    """
    by_camera: dict[str, list[DetectionRef]] = {}
    seen: set[str] = set()
    for detection in detections:
        if detection.ts.tzinfo is None:
            raise ValueError(f"detection {detection.detection_id}: ts must be timezone-aware")
        if detection.detection_id in seen:
            raise ValueError(f"detection {detection.detection_id} appears twice")
        seen.add(detection.detection_id)
        by_camera.setdefault(detection.camera_id, []).append(detection)
    batches: list[Batch] = []
    for camera_id in sorted(by_camera):
        members = sorted(by_camera[camera_id], key=_sort_key)
        batches.extend(_camera_batches(members, rules))
    batches.sort(key=lambda b: (b.started_at, b.batch_id))
    return batches


def is_closed(batch: Batch, as_of: datetime, later_exists: bool) -> bool:
    """Section 2: closed as of `as_of` iff `as_of >= closes_at`, or a later detection opened the next batch."""
    return later_exists or as_of >= batch.closes_at


def closed_batches(batches: Iterable[Batch], as_of: datetime) -> list[Batch]:
    """The batches closed as of `as_of`, ordered by (closes_at, batch_id): the order to process them in."""
    return sorted((b for b in batches if b.closed(as_of)), key=lambda b: (b.closes_at, b.batch_id))


def next_close(batches: Iterable[Batch], as_of: datetime) -> datetime | None:
    """When the earliest window still open as of `as_of` closes if no detection joins it (None: none open).

    A sensor that knows this can wait for that moment instead of for its next tick."""
    return min((b.closes_at for b in batches if not b.closed(as_of)), default=None)
