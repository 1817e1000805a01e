"""What one batch adds to a visit: who was seen on which camera, when (UTC and the camera's local time), whether a
person not known reached an entry or private zone, the longest stand-still, and whether they only walked past.

Pure code (no Dagster, DuckDB or I/O). Read only from closed-vocabulary, recogniser-made facts of the enriched
context (detector labels, track times and zones, `reid` readings, plates read by LPR), as the evidence floor reads
them (core/verdict/evidence.py): free text never links or separates a visit. Animals make no sighting (a fox across
the garden is not a visit); a batch with no person or vehicle at `min_confidence` or above gives None.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.plates import normalise_plate

PERSON = "person"
VEHICLES = frozenset({"car", "truck", "bus", "motorcycle", "bicycle", "van", "vehicle", "license_plate"})
# A re-id reading's "identity" that names nobody: never a link between two sightings ("same unknown" is no one).
PLACEHOLDER_IDENTITIES = frozenset({"", "unknown", "none", "null", "person", "stranger", "unidentified", "?"})
MAX_NAMES = 16  # identities or plates kept per sighting: a street party of a hundred tracks stays bounded
# A person walking past crosses the view: the box centre moves a quarter of the frame or more while the track lasts;
# one who stops to look at the house shifts a few hundredths. Passing by is not a stop (core/visits/facts.py).
PASSING_TRAVEL = 0.25


@dataclass(frozen=True)
class Sighting:
    """One batch's contribution to a visit (stored as JSON in `visits.sightings`)."""

    batch_id: str
    camera_id: str
    start: datetime  # UTC: the batch's first detection
    end: datetime  # UTC: its last detection
    local_time: str  # "HH:MM" at the camera's time zone
    local_hour: int
    timezone: str
    unknown_people: int  # person tracks (or untracked detections) not known
    known_people: int
    vehicles: int
    known_identities: tuple[str, ...] = ()  # re-identified as the household (reid.known) or a household plate
    identities: tuple[str, ...] = ()  # every re-identification name (known or not): links a visit, never frees it
    plates: tuple[str, ...] = ()  # normalised plates read
    entry_zones: tuple[str, ...] = ()  # entry zones a person not known reached
    private_zones: tuple[str, ...] = ()  # private zones a person not known reached
    longest_still_s: float = 0.0  # the longest dwell of a person not known here
    still_zone: str | None = None  # where (its first zone), None: no zone known
    vehicle_on_property: bool = False  # a vehicle not the household's on an entry or private zone (the driveway)
    passing: bool = False  # every person not known here walked across the view (no stop, no entry or private zone)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (not dataclasses.asdict: its deep copy was most of a link's time)."""
        row = {name: getattr(self, name) for name in _FIELDS}
        row["start"], row["end"] = self.start.isoformat(), self.end.isoformat()
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Sighting:
        values = {key: value for key, value in row.items() if key in _FIELDS}
        for key in ("start", "end"):
            values[key] = datetime.fromisoformat(values[key]).astimezone(UTC)
        for key in _NAME_LISTS:
            values[key] = tuple(values.get(key) or ())
        return cls(**values)

    @property
    def unknown(self) -> bool:
        return self.unknown_people > 0

    @property
    def names(self) -> frozenset[str]:
        """What can link this sighting to another by recognition: identities and plates."""
        return frozenset(self.identities) | frozenset(f"plate:{p}" for p in self.plates)


_FIELDS = tuple(f.name for f in fields(Sighting))
_NAME_LISTS = ("known_identities", "identities", "plates", "entry_zones", "private_zones")


def sightings_to_json(sightings: Iterable[Sighting]) -> str:
    return json.dumps([s.to_json() for s in sightings], ensure_ascii=False)


def sightings_from_json(text: str | None) -> tuple[Sighting, ...]:
    return tuple(Sighting.from_json(row) for row in json.loads(text or "[]"))


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _reid(context: EnrichedContext) -> dict[str, tuple[bool | None, str | None]]:
    """track_id -> (known, identity) from the `reid` observations; a track also read as not known is not known."""
    found: dict[str, tuple[bool | None, str | None]] = {}
    for obs in context.observations.get("reid", ()):
        if not obs.track_id:
            continue
        known = obs.fields.get("known")
        identity = obs.fields.get("identity")
        before_known, before_identity = found.get(obs.track_id, (None, None))
        if known is False or before_known is False:
            merged: bool | None = False
        else:
            merged = True if known is True or before_known is True else None
        named = isinstance(identity, str) and identity.strip().lower() not in PLACEHOLDER_IDENTITIES
        name = identity.strip() if named and isinstance(identity, str) else before_identity
        found[obs.track_id] = (merged, name)
    return found


def sighting_of(
    context: EnrichedContext,
    profile: CameraProfile | None,
    *,
    known_plates: Iterable[str] = (),
    min_confidence: float = 0.5,
) -> Sighting | None:
    """The batch's sighting, None when it shows no person or vehicle (animals, noise below `min_confidence`)."""
    profile = profile if profile is not None else context.camera_profile
    household = {normalise_plate(p) for p in known_plates if p}
    if profile is not None:
        household |= {normalise_plate(v.plate) for v in profile.resident_vehicles if v.plate}
    entry = set(profile.entry_zones) if profile is not None else set()
    private = set(profile.private_zones) if profile is not None else set()
    reid = _reid(context)
    unknown = known = vehicles = 0
    known_ids: list[str] = []
    identities: list[str] = []
    plates: list[str] = []
    reached_entry: set[str] = set()
    reached_private: set[str] = set()
    still_s, still_zone = 0.0, None
    on_property = False
    walkers = 0
    for track in context.detections.tracks:
        if track.max_confidence < min_confidence:
            continue
        is_person = PERSON in track.labels
        if not is_person and not (set(track.labels) & VEHICLES or track.plates):
            continue
        reid_known, identity = reid.get(track.track_id, (None, None))
        track_plates = [normalise_plate(p) for p in track.plates if p]
        plates += track_plates
        household_plate = next((p for p in track_plates if p in household), None)
        is_known = reid_known is True or household_plate is not None
        if identity:
            identities.append(identity)
        if is_known:
            known_ids.append(identity or (f"plate:{household_plate}" if household_plate else "known"))
        if not is_person:
            vehicles += 1
            zones = set(track.zones) | set(track.entered_zones)
            on_property = on_property or (not is_known and bool(zones & (entry | private)))
            continue
        if is_known:
            known += 1
            continue
        unknown += 1
        zones = set(track.zones) | set(track.entered_zones)
        reached_entry |= zones & entry
        reached_private |= zones & private
        if track.travel >= PASSING_TRAVEL and not track.stationary:
            walkers += 1
            continue  # walking, not standing still
        dwell = max(track.dwell_s, track.tracked_s)
        if dwell > still_s:
            still_s, still_zone = dwell, (sorted(track.zones)[0] if track.zones else None)
    for item in context.detections.items:  # a person the tracker did not follow is a person not known
        if item.track_id is None and item.label == PERSON and item.confidence >= min_confidence:
            unknown += 1
            zones = set(item.zones) or ({item.zone} if item.zone else set())
            reached_entry |= zones & entry
            reached_private |= zones & private
    if unknown + known + vehicles == 0:
        return None
    detections = context.detections
    start = (detections.first_ts or context.batch.started_at).astimezone(UTC)
    end = (detections.last_ts or context.batch.last_ts).astimezone(UTC)
    zone_name = profile.timezone if profile is not None else detections.timezone
    local = start.astimezone(_zone(zone_name))
    return Sighting(
        batch_id=context.batch.batch_id,
        camera_id=context.batch.camera_id,
        start=start,
        end=max(start, end),
        local_time=local.strftime("%H:%M"),
        local_hour=local.hour,
        timezone=zone_name,
        unknown_people=unknown,
        known_people=known,
        vehicles=vehicles,
        known_identities=tuple(sorted(set(known_ids)))[:MAX_NAMES],
        identities=tuple(sorted(set(identities)))[:MAX_NAMES],
        plates=tuple(sorted(set(plates)))[:MAX_NAMES],
        entry_zones=tuple(sorted(reached_entry))[:MAX_NAMES],
        private_zones=tuple(sorted(reached_private))[:MAX_NAMES],
        longest_still_s=round(still_s, 1),
        still_zone=still_zone,
        vehicle_on_property=on_property,
        passing=unknown > 0 and walkers == unknown and not (reached_entry or reached_private),
    )
