"""Frigate NVR payloads -> contract detection records (contract section 5). Pure: no I/O, no clock.

Shapes, as Frigate's code writes them (frigate/track/tracked_object.py `to_dict`, track/object_processing.py,
events/maintainer.py, comms/dispatcher.py, api/event.py; its MQTT docs are stale in places):
- MQTT `<prefix>/events`: `{"type": "new"|"update"|"end", "before": {...}, "after": {...}}`, two snapshots of one
  tracked object. `new` is sent when the object stops being a false positive (its previous state was one),
  `update` on a significant change (zones, position changes, attributes, stationary/moving) and at least once a
  minute while it is tracked (a parked car), and on better snapshots; `end` when tracking stops. `box` is integer
  pixels `[x1, y1, x2, y2]` of the camera's detect resolution; `sub_label` is null or `[name, score]`;
  `recognized_license_plate` is `[plate, score]` on the wire (a string in some docs: both accepted).
- MQTT `<prefix>/tracked_object_update`: `{"type": "description", "id", "description", "camera"}` carries a GenAI
  description of a tracked object (other types, e.g. face or lpr, repeat what `events` already carries: ignored).
- `/api/events` items: `id, camera, label, sub_label` (a string), `zones, start_time, end_time, false_positive,
  data`; `data.box` is `[x, y, w, h]` relative to the detect frame, `data.top_score` the track's score,
  `data.description`, `data.recognized_license_plate` (a string). Top-level `box`/`top_score` are null since 0.13.

State policy: which `events` payloads become a detection. Decided from `before` and `after` alone, so it is
deterministic and a redelivered message maps to the same detection (a no-op):
- `new` (or an `update` whose `before` is missing or still a false positive): always.
- `update` and `end`: only when something a reader of the night would want to know changed between `before` and
  `after` (`CHANGE_KINDS`): the label; the set of current zones; stationary <-> moving; the sub_label's name (a
  face or a known plate; not its score); the recognised plate's text; or, for a moving object, a move (Frigate's
  `path_data` gained a point, i.e. it moved 5 % of the frame diagonal, or the box centre moved by half the box's
  own width or height, for versions whose `before` shares `after`'s path); or the object is a person
  (`DWELL_LABELS`, change `dwell`): a person standing at the door for minutes is the scene, its time must reach
  the floor's loitering rule.
- Anything else is a periodic update of an unchanged object (the parked car's minute-by-minute updates, better
  snapshots, score drift) and is skipped and counted (`SKIP_UNCHANGED`); `after.false_positive` true is skipped
  and counted (`SKIP_FALSE_POSITIVE`).
A detection's `detection_id` is `frigate:<id>:<type>:<frame_time>`; its `ts` is `after.frame_time`; `zone` the
current zones comma-joined (for display) and `enrichment.frigate` the facts the context and the floor read:
`current_zones` and `entered_zones` (lists), `start_time` and `tracked_s` (the track's time in view at this frame),
`motionless_count`, and what core/frigate/identity.py reads of the sub_label, plate and attributes (identity only
from a recogniser; an unexpected shape ignored with a reason in `ignored`).

A GenAI description becomes a detection of the same track (`frigate:<id>:description:<sha256 of the text>`) with
the text as `enrichment.florence.caption` (cut to the contract's bound, the cut recorded). It needs the track's
label and time from an earlier `events` payload (`Track`). It takes the time, label, score and zones of the track's
latest DETECTION (`TrackDetection`; a description can arrive a minute after the object ended, after updates the
state policy skipped): so it falls inside that detection's batch window, joins it by the batching rules while that
batch is open, is fast-path exactly when that detection was, and is never a zone-less batch of its own. When that
batch is already recorded, storage/frigate.py adds the description to it and asks for its re-judgement. It carries
the identity Frigate recognised on that detection (a face or known plate: `reid`), so a resident's description,
judged as a fast-path batch of its own, is not a stranger's. Without a
known detection (none stored) it falls back to the track's last time, without zones.
An `/api/events` item becomes one detection `frigate:<id>:api` at `start_time` (padded by the recording's
pre-capture up to Frigate 0.14).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hsi_dagster.core.frigate.fields import (
    PayloadError,
    Resolution,
    cut_text,
    epoch_to_ts,
    read_bool,
    read_epoch,
    read_named_score,
    read_number,
    read_object,
    read_optional_unit,
    read_pixel_box,
    read_relative_box,
    read_text,
    read_unit,
    read_zones,
    show_value,
    zone_text,
)
from hsi_dagster.core.frigate.identity import (
    API_IDENTITY_FIELDS,
    MQTT_IDENTITY_FIELDS,
    Facts,
    frigate_facts,
    identity_enrichment,
    read_facts,
)
from hsi_dagster.core.intake.detections import (
    DEFAULT_BOUNDS,
    Bounds,
    Detection,
    Rejection,
    truncate_raw,
    validate_record,
)

EVENT_TYPES = ("new", "update", "end")
CHANGE_KINDS = ("new", "label", "zones", "stationary", "sub_label", "plate", "moved", "dwell")
SKIP_FALSE_POSITIVE = "false_positive"
SKIP_UNCHANGED = "unchanged"
SKIP_NOT_A_DETECTION = "not_a_detection"  # non-description object updates, other topics
MAX_FRIGATE_ID_CHARS = 64
# Labels whose periodic updates are kept (change "dwell"): a person standing at the door for minutes is the scene; a
# parked car's minute-by-minute updates are not.
DWELL_LABELS = frozenset({"person"})
_TOPIC_LINE = re.compile(r"^([^\s{\[]+)\s+(\{.*)$", re.DOTALL)


# ------------------------------------------------------------------------------------------------ outcomes
@dataclass(frozen=True)
class Emit:
    """A contract record made from a payload; `sources` maps contract fields to the Frigate fields they came from
    (so a validator reason can name both)."""

    record: dict[str, Any]
    changes: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Skip:
    """A payload that is valid but is not a detection (a false positive, an unchanged update, a review...)."""

    reason: str


@dataclass(frozen=True)
class Invalid:
    """A payload that cannot be mapped; the reason starts with the Frigate field it names."""

    reason: str


Outcome = Emit | Skip | Invalid


@dataclass(frozen=True)
class Track:
    """What a description needs of its tracked object, from the latest `events` payload seen for it."""

    track_id: str
    camera_id: str
    label: str
    confidence: float
    last_seen: float  # epoch seconds: end_time once ended, else the latest frame_time


# ------------------------------------------------------------------------------------------------ enrichment
def _caption(enrichment: dict[str, Any], text: str) -> None:
    caption, cut_from = cut_text(text)
    enrichment["florence"] = {"caption": caption}
    if cut_from is not None:
        enrichment.setdefault("frigate", {})["description_cut_from_chars"] = cut_from


# ------------------------------------------------------------------------------------------------ classification
def split_topic(line: str) -> tuple[str | None, str]:
    """A recorded line is a payload, or `topic payload` as `mosquitto_sub -v` prints it."""
    stripped = line.strip()
    if stripped.startswith(("{", "[")):
        return None, stripped
    match = _TOPIC_LINE.match(stripped)
    return (match.group(1), match.group(2)) if match else (None, stripped)


def payload_kind(payload: Any, topic: str | None = None) -> str:
    """`events`, `tracked_object_update`, `reviews`, `api_event` or `other`: by topic when known, else by shape."""
    if topic is not None:
        suffix = topic.rsplit("/", 1)[-1]
        if suffix in ("events", "tracked_object_update", "reviews"):
            return suffix
        return "other"
    if not isinstance(payload, dict):
        return "other"
    if "after" in payload or "before" in payload:
        after = payload.get("after")
        return "reviews" if isinstance(after, dict) and "severity" in after else "events"  # reviews carry severity
    if payload.get("type") == "description" or ("description" in payload and "start_time" not in payload):
        return "tracked_object_update"
    if "start_time" in payload and "label" in payload:
        return "api_event"
    if "type" in payload and "id" in payload:
        return "tracked_object_update"
    return "other"


# ------------------------------------------------------------------------------------------------ events (MQTT)
def _named(state: Mapping[str, Any], field_name: str) -> str | None:
    """The name of a `[name, score]` field (sub_label, recognized_license_plate), None when absent or unreadable."""
    try:
        parsed = read_named_score(state.get(field_name), field_name)
    except PayloadError:
        return None
    return parsed[0] if parsed else None


def _box_centre_and_size(value: Any) -> tuple[float, float, float, float] | None:
    if not isinstance(value, list) or len(value) != 4:
        return None
    try:
        x1, y1, x2, y2 = (read_number(v, "box") for v in value)
    except PayloadError:
        return None
    return (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1


def _moved(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    before_path, after_path = before.get("path_data"), after.get("path_data")
    if isinstance(before_path, list) and isinstance(after_path, list) and len(after_path) > len(before_path):
        return True
    old, new = _box_centre_and_size(before.get("box")), _box_centre_and_size(after.get("box"))
    if old is None or new is None:
        return False
    return abs(new[0] - old[0]) >= old[2] / 2 or abs(new[1] - old[1]) >= old[3] / 2


def event_changes(kind: str, before: Any, after: Mapping[str, Any]) -> tuple[str, ...]:
    """The state policy (module docstring): why this payload is a detection, or () for an unchanged object."""
    if kind == "new" or not isinstance(before, dict) or before.get("false_positive") is True:
        return ("new",)
    changes = []
    if before.get("label") != after.get("label"):
        changes.append("label")
    if set(before.get("current_zones") or ()) != set(after.get("current_zones") or ()):
        changes.append("zones")
    if bool(before.get("stationary")) != bool(after.get("stationary")):
        changes.append("stationary")
    if _named(before, "sub_label") != _named(after, "sub_label"):
        changes.append("sub_label")
    if _named(before, "recognized_license_plate") != _named(after, "recognized_license_plate"):
        changes.append("plate")
    if not after.get("stationary") and _moved(before, after):
        changes.append("moved")
    if not changes and after.get("label") in DWELL_LABELS:
        changes.append("dwell")  # the person still there: its time on the zone must reach the floor (loitering)
    return tuple(changes)


def tracking_after(event_type: str | None) -> bool | None:
    """Whether Frigate still tracks the object after a detection of this MQTT event type (batching's track hold):
    yes after `new`/`update`, no after `end`, unsaid for a description (or any other source)."""
    return {"new": True, "update": True, "end": False}.get(event_type or "")


def _contract_record(
    detection_id: str,
    ts: str,
    camera: str,
    object_id: str,
    label: str,
    confidence: float,
    bbox: list[float] | None,
    zones: list[str],
    enrichment: dict[str, Any],
) -> dict[str, Any]:
    """A tracked object as the contract's record, its keys in the contract's order (the JSON line is stored as is)."""
    return {
        "detection_id": detection_id,
        "camera_id": camera,
        "ts": ts,
        "label": label,
        "confidence": confidence,
        "bbox": bbox,
        "track_id": object_id,
        "zone": zone_text(zones),
        "enrichment": enrichment,
    }


def map_event(payload: Any, resolutions: Mapping[str, Resolution]) -> Outcome:
    """One `<prefix>/events` payload -> Emit (a detection), Skip (false positive, unchanged) or Invalid."""
    try:
        return _map_event(payload, resolutions)
    except PayloadError as exc:
        return Invalid(str(exc))


def _map_event(payload: Any, resolutions: Mapping[str, Resolution]) -> Outcome:
    message = read_object(payload, "payload")
    kind = message.get("type")
    if kind not in EVENT_TYPES:
        raise PayloadError(f"type: must be one of {', '.join(EVENT_TYPES)}, got {show_value(kind)}")
    after = read_object(message.get("after"), "after")
    if after.get("false_positive") is True:
        return Skip(SKIP_FALSE_POSITIVE)
    changes = event_changes(kind, message.get("before"), after)
    object_id = read_text(after.get("id"), "after.id", MAX_FRIGATE_ID_CHARS)
    camera = read_text(after.get("camera"), "after.camera")
    label = read_text(after.get("label"), "after.label")
    frame_time = read_epoch(after.get("frame_time"), "after.frame_time")
    score = read_optional_unit(after.get("score"), "after.score")
    top_score = read_optional_unit(after.get("top_score"), "after.top_score")
    confidence = score if score is not None else top_score
    if confidence is None:
        raise PayloadError("after.score: required (the detector's score), got neither score nor top_score")
    zones = read_zones(after.get("current_zones"), "after.current_zones")
    entered = read_zones(after.get("entered_zones"), "after.entered_zones")
    stationary = read_bool(after.get("stationary"), "after.stationary")
    resolution = resolutions.get(camera)
    if resolution is None:
        raise PayloadError(
            f"after.camera: no detect resolution known for camera {camera!r} (cameras.{camera}.detect.width/height "
            "in the Frigate config)"
        )
    bbox = read_pixel_box(after.get("box"), "after.box", resolution, camera)
    if not changes:
        return Skip(SKIP_UNCHANGED)
    facts = read_facts(label, after, MQTT_IDENTITY_FIELDS, prefix="after.")
    enrichment = identity_enrichment(label, facts)
    frigate: dict[str, Any] = {"source": "mqtt", "type": kind, "changes": list(changes), "stationary": stationary}
    if zones:
        frigate["current_zones"] = zones
    if entered:
        frigate["entered_zones"] = entered
    if top_score is not None:
        frigate["top_score"] = top_score
    _dwell_facts(after, frame_time, frigate, facts)
    frigate.update(frigate_facts(facts))
    enrichment["frigate"] = frigate
    detection_id, ts = f"frigate:{object_id}:{kind}:{frame_time:.6f}", epoch_to_ts(frame_time)
    record = _contract_record(detection_id, ts, camera, object_id, label, confidence, bbox, zones, enrichment)
    return Emit(record, changes, _EVENT_SOURCES)


def _dwell_facts(after: Mapping[str, Any], frame_time: float, frigate: dict[str, Any], facts: Facts) -> None:
    """How long Frigate has tracked the object (`start_time` .. `frame_time`) and how long it has not moved
    (`motionless_count`, frames): what makes a stationary person's time count even when its updates are skipped."""
    start = after.get("start_time")
    if start is not None:
        try:
            started = read_epoch(start, "after.start_time")
        except PayloadError as exc:
            facts.ignored.append(str(exc))
        else:
            if started <= frame_time:
                frigate["start_time"] = epoch_to_ts(started)
                frigate["tracked_s"] = round(frame_time - started, 3)
            else:
                facts.ignored.append(f"after.start_time: {started} is after frame_time {frame_time}")
    motionless = after.get("motionless_count")
    if motionless is not None:
        if isinstance(motionless, int) and not isinstance(motionless, bool) and motionless >= 0:
            frigate["motionless_count"] = motionless
        else:
            facts.ignored.append(f"after.motionless_count: must be a whole number >= 0, got {show_value(motionless)}")


_EVENT_SOURCES = {
    "detection_id": "after.id",
    "track_id": "after.id",
    "camera_id": "after.camera",
    "ts": "after.frame_time",
    "label": "after.label",
    "confidence": "after.score",
    "bbox": "after.box",
    "zone": "after.current_zones",
    "enrichment": "after.sub_label",
}


def track_from_event(payload: Any) -> Track | None:
    """The track a later description will need, from a valid events payload (None if it is not one)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("after"), dict):
        return None
    after = payload["after"]
    try:
        object_id = read_text(after.get("id"), "after.id", MAX_FRIGATE_ID_CHARS)
        camera = read_text(after.get("camera"), "after.camera")
        label = read_text(after.get("label"), "after.label")
        frame_time = read_epoch(after.get("frame_time"), "after.frame_time")
        end_time = None if after.get("end_time") is None else read_epoch(after.get("end_time"), "after.end_time")
        top = read_optional_unit(after.get("top_score"), "after.top_score")
        score = read_optional_unit(after.get("score"), "after.score")
    except PayloadError:
        return None
    confidence = top if top is not None else score
    if confidence is None:
        return None
    return Track(object_id, camera, label, confidence, end_time if end_time is not None else frame_time)


# ------------------------------------------------------------------------------------------------ descriptions
@dataclass(frozen=True)
class TrackDetection:
    """The latest detection made of a track (in the same load, or stored): where its description belongs."""

    detection_id: str
    ts: str  # the contract's RFC 3339 text
    label: str
    confidence: float
    zone: str | None = None
    current_zones: tuple[str, ...] = ()
    entered_zones: tuple[str, ...] = ()
    reid: Mapping[str, Any] | None = None  # a recogniser's identity of the track (identity_enrichment), if any

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrackDetection:
        """From a mapped record (`Emit.record`)."""
        raw = record.get("enrichment")
        enrichment: dict[str, Any] = raw if isinstance(raw, dict) else {}
        frigate_facts = enrichment.get("frigate")
        frigate: dict[str, Any] = frigate_facts if isinstance(frigate_facts, dict) else {}
        reid = enrichment.get("reid")
        return cls(
            str(record["detection_id"]),
            str(record["ts"]),
            str(record["label"]),
            float(record["confidence"]),
            record.get("zone"),
            tuple(z for z in frigate.get("current_zones") or () if isinstance(z, str)),
            tuple(z for z in frigate.get("entered_zones") or () if isinstance(z, str)),
            dict(reid) if isinstance(reid, dict) and reid.get("known") is True else None,
        )


def map_description(payload: Any, track: Track | None, latest: TrackDetection | None = None) -> Outcome:
    """A `tracked_object_update` of type `description` -> a detection of its track carrying the text as a caption, at
    the time and zones of the track's `latest` detection (module docstring)."""
    try:
        message = read_object(payload, "payload")
        if message.get("type") != "description":
            return Skip(SKIP_NOT_A_DETECTION)
        object_id = read_text(message.get("id"), "id", MAX_FRIGATE_ID_CHARS)
        description = message.get("description")
        if not isinstance(description, str) or not description.strip():
            raise PayloadError(f"description: must be a non-empty string, got {show_value(description)}")
        if track is None:
            raise PayloadError(
                f"id: no events payload seen for tracked object {object_id!r}, so its camera, label and time are "
                "unknown (import or listen to its events first)"
            )
        camera = message.get("camera")
        camera = track.camera_id if camera is None else read_text(camera, "camera")
    except PayloadError as exc:
        return Invalid(str(exc))
    digest = hashlib.sha256(description.encode("utf-8", errors="replace")).hexdigest()[:16]
    enrichment: dict[str, Any] = {}
    _caption(enrichment, description)
    frigate = enrichment.setdefault("frigate", {})
    frigate.update({"source": "mqtt", "type": "description"})
    record: dict[str, Any] = {
        "detection_id": f"frigate:{object_id}:description:{digest}",
        "camera_id": camera,
        "ts": epoch_to_ts(track.last_seen),
        "label": track.label,
        "confidence": track.confidence,
        "track_id": object_id,
    }
    if latest is not None:
        record.update({"ts": latest.ts, "label": latest.label, "confidence": latest.confidence, "zone": latest.zone})
        frigate["follows"] = latest.detection_id
        if latest.current_zones:
            frigate["current_zones"] = list(latest.current_zones)
        if latest.entered_zones:
            frigate["entered_zones"] = list(latest.entered_zones)
        if latest.reid is not None:  # the same tracked object Frigate recognised: the description is hers too
            enrichment["reid"] = dict(latest.reid)
    record["enrichment"] = enrichment
    sources = {"detection_id": "id", "track_id": "id", "camera_id": "camera", "enrichment": "description"}
    return Emit(record, ("description",), sources)


# ------------------------------------------------------------------------------------------------ /api/events
def map_api_event(item: Any) -> Outcome:
    """One `/api/events` item -> one detection at its start, or Skip (false positive) or Invalid."""
    try:
        return _map_api_event(item)
    except PayloadError as exc:
        return Invalid(str(exc))


def _map_api_event(item: Any) -> Outcome:
    event = read_object(item, "item")
    if event.get("false_positive") is True:
        return Skip(SKIP_FALSE_POSITIVE)
    object_id = read_text(event.get("id"), "id", MAX_FRIGATE_ID_CHARS)
    camera = read_text(event.get("camera"), "camera")
    label = read_text(event.get("label"), "label")
    start = read_epoch(event.get("start_time"), "start_time")
    end = None if event.get("end_time") is None else read_epoch(event.get("end_time"), "end_time")
    data = {} if event.get("data") is None else read_object(event.get("data"), "data")
    confidence = next(
        (
            read_unit(value, name)
            for name, value in (
                ("data.top_score", data.get("top_score")),
                ("top_score", event.get("top_score")),
                ("data.score", data.get("score")),
            )
            if value is not None
        ),
        None,
    )
    if confidence is None:
        raise PayloadError("data.top_score: required (the track's score), got neither data.top_score nor top_score")
    bbox = read_relative_box(data.get("box"), "data.box")
    zones = read_zones(event.get("zones"), "zones")
    facts = read_facts(label, {**data, "sub_label": event.get("sub_label")}, API_IDENTITY_FIELDS, prefix="")
    enrichment = identity_enrichment(label, facts)
    description = data.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise PayloadError(f"data.description: must be a string, got {show_value(description)}")
        if description.strip():
            _caption(enrichment, description)
    frigate = enrichment.setdefault("frigate", {})
    frigate.update({"source": "api", "type": str(data.get("type") or "object")})
    if zones:
        frigate["entered_zones"] = zones  # the API's `zones`: every zone the object entered
    frigate.update(frigate_facts(facts))
    if end is not None:
        frigate["end_time"] = epoch_to_ts(end)
    detection_id, ts = f"frigate:{object_id}:api", epoch_to_ts(start)
    record = _contract_record(detection_id, ts, camera, object_id, label, confidence, bbox, zones, enrichment)
    return Emit(record, ("api",), _API_SOURCES)


_API_SOURCES = {
    "detection_id": "id",
    "track_id": "id",
    "camera_id": "camera",
    "ts": "start_time",
    "label": "label",
    "confidence": "data.top_score",
    "bbox": "data.box",
    "zone": "zones",
    "enrichment": "sub_label",
}


# ------------------------------------------------------------------------------------------------ validation
def to_detection(
    emit: Emit, raw: str | bytes, *, source: str, line_no: int, bounds: Bounds = DEFAULT_BOUNDS
) -> tuple[str, Detection] | Rejection:
    """The mapped record through the contract's validator: (its JSON line, the Detection), or a Rejection that
    keeps the original payload and names the Frigate field behind the contract field."""
    line = json.dumps(emit.record, ensure_ascii=False, separators=(",", ":"))
    result = validate_record(line, source=source, line_no=line_no, bounds=bounds)
    if isinstance(result, Detection):
        return line, result
    contract_field = result.field.split(".", 1)[0].split("[", 1)[0]
    origin = emit.sources.get(contract_field)
    reason = f"{origin} -> {result.reason}" if origin else result.reason
    return Rejection(source, line_no, truncate_raw(raw, bounds.raw_chars), reason)
