"""A visit's structured facts, as the floor, the Dagster metadata, MQTT and the phone show them: its cameras in order
with local times, its span, its local hour, the longest stand-still and where, known or not, and whether a person
not known reached an entry or private zone (and after which cameras).

Pure code. Computed from the visit's kept sightings (at most VISIT_MAX_BATCHES), never from the detections again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hsi_dagster.core.visits.linking import Visit
from hsi_dagster.core.visits.sighting import Sighting

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def ordinal(n: int) -> str:
    return ORDINALS[n - 1] if 1 <= n <= len(ORDINALS) else f"{n}th"


@dataclass(frozen=True)
class CameraStop:
    camera_id: str
    local_time: str  # "HH:MM" at the camera's time zone, when the visit first reached it

    def __str__(self) -> str:
        return f"{self.camera_id} {self.local_time}"


@dataclass(frozen=True)
class VisitFacts:
    visit_id: str
    batches: int
    stops: tuple[CameraStop, ...]  # every camera, in the order reached
    span_s: float
    local_hour: int  # of the visit's first sighting
    known: bool  # only known people (and their vehicles): the household
    unknown_sightings: tuple[Sighting, ...]  # the sightings with a person not known, in time order
    longest_still_s: float
    still_where: str | None  # "camera (zone)" of the longest stand-still
    reached: str | None  # "entry zone 'porch' on front_door" reached by a person not known after other cameras
    reached_camera: str | None = None
    sightings: tuple[Sighting, ...] = ()  # every sighting, in time order (the repeat-nights rule reads plates on cars)

    @property
    def unknown_stops(self) -> tuple[CameraStop, ...]:
        """Cameras where a person not known was seen, in order (first time each)."""
        seen: dict[str, CameraStop] = {}
        for s in self.unknown_sightings:
            seen.setdefault(s.camera_id, CameraStop(s.camera_id, s.local_time))
        return tuple(seen.values())

    @property
    def stopped(self) -> bool:
        """A person not known stopped somewhere in the visit (did not only walk across every view): people walking
        along the street past two cameras at once, or one passer-by on both, make no visit worth a level."""
        return any(not s.passing for s in self.unknown_sightings)

    @property
    def unknown_minutes(self) -> int:
        """Whole minutes from the first to the last sighting of a person not known (rounded up, at least 1)."""
        if not self.unknown_sightings:
            return 0
        first = self.unknown_sightings[0].start
        last = max(s.end for s in self.unknown_sightings)
        return max(1, math.ceil((last - first).total_seconds() / 60))

    def cameras_text(self) -> str:
        return ", ".join(str(stop) for stop in self.stops)


def visit_facts(visit: Visit) -> VisitFacts:
    sightings = visit.sightings
    stops: dict[str, CameraStop] = {}
    for s in sightings:
        stops.setdefault(s.camera_id, CameraStop(s.camera_id, s.local_time))
    unknown = tuple(s for s in sightings if s.unknown)
    still = max(unknown, key=lambda s: s.longest_still_s, default=None)
    still_where = None
    if still is not None and still.longest_still_s > 0:
        still_where = still.camera_id + (f" ({still.still_zone})" if still.still_zone else "")
    reached = reached_camera = None
    first_unknown_camera = unknown[0].camera_id if unknown else None
    for s in unknown:
        if s.camera_id == first_unknown_camera:
            continue
        if s.entry_zones or s.private_zones:
            kind, zone = ("entry", s.entry_zones[0]) if s.entry_zones else ("private", s.private_zones[0])
            reached, reached_camera = f"{kind} zone {zone!r} on {s.camera_id}", s.camera_id
            break
    return VisitFacts(
        visit_id=visit.visit_id,
        batches=len(sightings),
        stops=tuple(stops.values()),
        span_s=visit.span_s,
        local_hour=sightings[0].local_hour,
        known=not unknown and bool(visit.known_identities),
        unknown_sightings=unknown,
        longest_still_s=still.longest_still_s if still is not None else 0.0,
        still_where=still_where,
        reached=reached,
        reached_camera=reached_camera,
        sightings=sightings,
    )
