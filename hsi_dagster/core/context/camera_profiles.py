"""What is normal at each camera: the operator's per-camera context for the risk prompt.

The file (YAML or JSON; `CAMERA_CONTEXT_PATH`) has a top-level `cameras` mapping of camera id -> profile:

    cameras:
      front_door:
        description: Porch camera facing the street.
        timezone: Europe/Paris          # IANA name; sets time of day (default UTC; `hsi config check` names cameras
                                        # without one: their history baselines assume UTC)
        approached_from: [driveway]     # history: cameras a visitor passes just before this one
        entry_point: true               # history: this camera watches a way into the house
        former_camera_ids: [porch]      # history: ids this camera had before a rename (their history counts)
        expected_deliveries: ["Parcel carriers weekdays 09:00-19:00"]
        resident_vehicles: [{description: white hatchback, plate: AB-123-CD}]
        pets: [{species: dog, description: black labrador}]
        working_hours: [{who: gardener, days: Tue, start: "08:00", end: "12:00"}]
        notes: ["Neighbours' children cut across the lawn after school"]
        zones: [porch, path]            # the zone names the detector reports at this camera (Frigate's zones)
        entry_zones: [porch]            # zones at a way into the house: a door, a gate, a window
        private_zones: [path]           # the household's own ground that is not a way in

Known zones are the ones in `zones:`; `entry_zones` and `private_zones` must name known zones (a typo would silently
disable an evidence-floor rule, so it is an error naming the camera and the zone: `hsi config check`, start-up).
Unknown keys are errors (a typo would otherwise silently drop context). The rendered text comes right after
the static system prompt, so it is shared by every batch of one camera in llama-server's prompt cache.

Pure: this module parses text; reading the file is `hsi_dagster.settings.load_camera_profiles`.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hsi_dagster.core.context.plates import plate_problem

_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
ZoneName = Annotated[str, Field(min_length=1, max_length=64)]
CameraId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class CameraProfileError(ValueError):
    """The camera profile file is unreadable or invalid; the message names the file, camera and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResidentVehicle(_Strict):
    description: str = Field(min_length=1, max_length=200)
    plate: str | None = Field(None, max_length=20)  # a plate Frigate reads on it is the household (the floor)

    @field_validator("plate")
    @classmethod
    def _a_plate(cls, value: str | None) -> str | None:
        problem = None if value is None else plate_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class Pet(_Strict):
    species: str = Field(min_length=1, max_length=40)
    description: str = Field("", max_length=200)


class WorkingHours(_Strict):
    who: str = Field(min_length=1, max_length=100)
    days: str = Field("every day", max_length=60)
    start: str
    end: str

    @field_validator("start", "end", mode="before")
    @classmethod
    def _hhmm(cls, value: object) -> str:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
            value = f"{value // 60:02d}:{value % 60:02d}"  # YAML 1.1 reads unquoted 18:00 as 1080 (base 60)
        if not _HHMM.match(str(value)):
            raise ValueError("expected HH:MM (24 h)")
        return str(value)


class CameraProfile(_Strict):
    camera_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str = Field("", max_length=500)
    timezone: str = "UTC"
    expected_deliveries: list[str] = Field(default_factory=list, max_length=20)
    resident_vehicles: list[ResidentVehicle] = Field(default_factory=list, max_length=20)
    pets: list[Pet] = Field(default_factory=list, max_length=20)
    working_hours: list[WorkingHours] = Field(default_factory=list, max_length=20)
    notes: list[str] = Field(default_factory=list, max_length=20)
    zones: list[ZoneName] = Field(default_factory=list, max_length=50)
    entry_zones: list[ZoneName] = Field(default_factory=list, max_length=50)
    private_zones: list[ZoneName] = Field(default_factory=list, max_length=50)
    # history (core/context/history.py): the cameras a visitor passes just before this one (street -> driveway -> back
    # door: back_door is approached_from [driveway]), whether it watches a way in, and the ids it had before a rename
    approached_from: list[CameraId] = Field(default_factory=list, max_length=20)
    entry_point: bool = False
    former_camera_ids: list[CameraId] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _zones_known(self) -> CameraProfile:
        known = set(self.zones)
        for field_name in ("entry_zones", "private_zones"):
            unknown = [zone for zone in getattr(self, field_name) if zone not in known]
            if unknown:
                declared = ", ".join(self.zones) or "none"
                raise ValueError(
                    f"{field_name} names unknown zone(s) {', '.join(repr(z) for z in unknown)} (zones declared in "
                    f"'zones:' for camera {self.camera_id!r}: {declared})"
                )
        return self

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA time zone {value!r}") from None
        return value

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def to_prompt_text(self) -> str:
        """Compact, deterministic lines (same profile -> same bytes -> prompt-cache hit)."""
        lines = [f"camera: {self.camera_id}"]
        if self.description:
            lines.append(f"description: {self.description}")
        lines.append(f"local time zone: {self.timezone}")
        if self.expected_deliveries:
            lines.append("expected deliveries: " + "; ".join(self.expected_deliveries))
        if self.resident_vehicles:
            lines.append(
                "residents' vehicles: "
                + "; ".join(v.description + (f" (plate {v.plate})" if v.plate else "") for v in self.resident_vehicles)
            )
        if self.pets:
            lines.append(
                "residents' pets: "
                + "; ".join(p.species + (f" ({p.description})" if p.description else "") for p in self.pets)
            )
        if self.working_hours:
            lines.append(
                "expected workers: " + "; ".join(f"{w.who} {w.days} {w.start}-{w.end}" for w in self.working_hours)
            )
        if self.entry_zones:
            lines.append("entry zones (doors, gates, windows): " + ", ".join(self.entry_zones))
        if self.private_zones:
            lines.append("private zones: " + ", ".join(self.private_zones))
        if self.approached_from:
            lines.append("approached from cameras: " + ", ".join(self.approached_from))
        if self.entry_point:
            lines.append("watches an entry point of the house")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


def camera_profile_text(profile: CameraProfile | None) -> str:
    """The text `render_messages` expects; empty when the camera has no profile."""
    return profile.to_prompt_text() if profile is not None else ""


def _entries(raw: Any, source: str) -> list[tuple[str, dict]]:
    if not isinstance(raw, dict) or "cameras" not in raw:
        raise CameraProfileError(f"{source}: expected a top-level 'cameras' mapping (camera id -> profile)")
    cameras = raw["cameras"]
    if isinstance(cameras, dict):
        out = []
        for camera_id, body in cameras.items():
            body = dict(body or {})
            if body.setdefault("camera_id", str(camera_id)) != str(camera_id):
                raise CameraProfileError(
                    f"{source}: camera {camera_id!r}: camera_id {body['camera_id']!r} differs from its key"
                )
            out.append((str(camera_id), body))
        return out
    if isinstance(cameras, list):
        out = []
        for index, body in enumerate(cameras):
            if not isinstance(body, dict) or "camera_id" not in body:
                raise CameraProfileError(f"{source}: cameras[{index}]: each entry needs a camera_id")
            out.append((str(body["camera_id"]), dict(body)))
        return out
    raise CameraProfileError(f"{source}: 'cameras' must be a mapping or a list")


def parse_camera_profiles(text: str, *, source: str, json_format: bool = False) -> dict[str, CameraProfile]:
    """Profiles from the text of a YAML (or, with json_format, JSON) file; CameraProfileError names `source`, the
    camera and the field on bad input."""
    try:
        raw = json.loads(text) if json_format else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise CameraProfileError(f"{source}: not valid {'JSON' if json_format else 'YAML'}: {exc}") from None
    profiles: dict[str, CameraProfile] = {}
    for camera_id, body in _entries(raw, source):
        if camera_id in profiles:
            raise CameraProfileError(f"{source}: camera {camera_id!r} is defined twice")
        try:
            profiles[camera_id] = CameraProfile.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'profile'}: {err['msg']}" for err in exc.errors()
            )
            raise CameraProfileError(f"{source}: camera {camera_id!r}: {problems}") from None
    return profiles
