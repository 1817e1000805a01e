"""The evidence floor: the lowest risk score the structured evidence of a batch justifies, whatever the model says.

Pure code (no Dagster, DuckDB or I/O). The stored verdict is max(model score, floor) (core/verdict/final.py), so a model
that copies a worked example's "8" cannot talk a crowbar at the back door down to "low". The floor never lowers a
verdict, and it reads only closed-vocabulary or numeric inputs: detector labels, numbers, booleans, action labels
from the action model's label set, the hour, the track's timestamps, zone names and the history facts. Captions,
clothing descriptions, scene text and every other free text never raise or lower it (they can carry injected text).

The rules (each names the structured fields it reads; the floor is the highest score of the rules that fire):

rule              | reads                                   | fires when                                   | score
------------------|-----------------------------------------|----------------------------------------------|------------
weapon            | detections.items[].label, .confidence   | >= weapon_min_detections detections labelled | 90 critical
                  |                                         | a weapon_labels entry, confidence >= min     |
violence          | violence.score of a track (count, top)  | >= violence_min_frames readings of ONE track | 90 critical
                  |                                         | >= violence_threshold (not one noisy frame)  |
forcing           | action.label, action.score, track zone, | a forcing_actions label on >= action_min_    | 90 critical
                  | profile.entry_zones                     | frames frames, at an entry zone              |
                  |                                         | ... elsewhere (a car window, the shed)       | 75 high
probing           | action.label, action.score, reid.known  | a probing_actions label (handles, windows,   | 70 high
                  |                                         | cars, packages) by a person not known        |
one frame, seen   | action.label on < action_min_frames,    | a forcing or probing label on one frame with | 75/70 high
with more         | vehicle.damage, a second person         | vehicle damage or a second person not known  |
tool              | detections.items[].label, reid.known    | a tool_labels label (COCO scissors, baseball | 70 high
                  |                                         | bat, ...) with a person not known            |
watching          | action.label, action.score, reid.known  | a watching_actions label (photographing the  | 45 medium
                  |                                         | house) by a person not known                 |
person at night   | reid.known, hour, track zones,          | a person not known on an entry or private    | 70 high
                  | profile.entry_zones / private_zones     | zone in the night hours                      |
vehicle at night  | reid.known, hour, track zones, label    | a vehicle or object (not an animal) not known| 45 medium
                  |                                         | on an entry or private zone, night hours     |
loitering         | track first_ts..last_ts, reid.known,    | a person not known stays >= loiter_seconds   | 45 medium
                  | track zones, detections.is_dark         | on an entry or private zone in the dark      |
unusual here      | history.unusual_labels, reid.known,     | "person" unusual here at this hour, a person | 45 medium
                  | track zones                             | not known on an entry or private zone        |
path to entry     | history.path_to_entry, reid.known, hour | a person not known ends a path of >= 2       | 45 medium
                  |                                         | cameras towards this one (night hours: 70)   |
after an alert    | history.recent_activity[].risk_level,   | another camera was high or critical in the   | 70 high
                  | reid.known                              | history window and a person not known is here|

The presence rules (person/vehicle at night, loitering) count a track only when its best detector confidence
is >= `presence_min_confidence` (a rain streak read as a person at 0.3 is not a person at the door).
"Not known" means no re-identification reading of that track (or untracked detection) says `known: true` and no
plate read on it is on the household's list (`EvidenceRules.known_plates`, KNOWN_PLATES, plus the profile's
`resident_vehicles` plates); a track with no re-id at all is not known (the floor errs towards an alert). Identities
come from recognisers only: core/frigate/identity.py never turns hsi's own write-back, a manual sub_label or a
courier's logo into `reid` (a logo is an attribute: named in the reason, never an exemption at night).
A track's zones are every zone of its detections (Frigate's `current_zones`, overlapping zones all count) and the
zones it entered in its life (`entered_zones`); its dwell is the longer of its span in the batch and its time
tracked (Frigate's `start_time` .. the last detection: a stationary person's skipped updates still count).
A camera without a profile: zone roles are guessed from their names (core/verdict/watched_zones.py), and a person not
known at night on no placed zone is 45 medium (where on the property is not known).
The night hours are local hours of the camera's time zone (the profile's; UTC without one) in [`night_start_hour`,
`night_end_hour`).

Household exceptions (core/verdict/exceptions.py): given the exceptions in force (plain data, read by storage) and the
moment of judgement, a batch whose pattern (camera, labels, zones, hour band, recognised identities) is exactly an
exception's has its presence rules lifted (person or vehicle at night, loitering, unusual here: EXEMPTIBLE_RULES),
each kept in the reasons with "lifted: the household marked N similar events harmless: exception KEY, expires DATE".
Every other rule stands (weapon, violence, forcing, probing, one frame corroborated, tool, watching, path to entry,
after an alert), and nothing is lifted while a person not known is on an entry zone at night unless the pattern
names a recognised identity: the reasons say the exception was not applied and why.

Malformed inputs (a field of the wrong type, a number out of range) are ignored: the rule reads on without them and
`Floor.ignored` carries one line naming the detection(s) and the field; never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext, NumberRange, Observation
from hsi_dagster.core.context.history import HistoryFacts
from hsi_dagster.core.context.plates import normalise_plate, plate_problem
from hsi_dagster.core.prompt.risk_schema import level_for_score
from hsi_dagster.core.verdict.exceptions import EXEMPTIBLE_RULES, HouseholdException, batch_pattern, exception_for
from hsi_dagster.core.verdict.watched_zones import WatchedZones, watched_zones

CRITICAL, HIGH, MEDIUM = 90, 70, 45
FORCING_ELSEWHERE = 75
ALERT_LEVELS = frozenset({"high", "critical"})

# COCO's own weapon-like classes are knife, scissors and baseball bat; scissors and a bat are also garden and play
# tools, so they are "tools" (high with a stranger) and only unambiguous weapons are "weapons" (critical).
DEFAULT_WEAPON_LABELS = ("knife", "gun", "handgun", "pistol", "rifle", "shotgun", "firearm", "machete", "weapon")
DEFAULT_TOOL_LABELS = ("scissors", "baseball bat", "crowbar", "hammer", "axe", "bolt cutters")
# Action-model labels (a closed label set). A label matches an entry when it equals it or starts with it + " ".
DEFAULT_FORCING_ACTIONS = (
    "breaking",
    "breaking in",
    "forcing",
    "prying",
    "smashing",
    "kicking a door",
    "climbing in",
    "climbing through a window",
    "fighting",
    "punching",
    "kicking",
    "attacking",
    "assaulting",
    "threatening",
)
DEFAULT_PROBING_ACTIONS = (
    "trying the door handle",
    "trying a door handle",
    "trying door handles",
    "trying handles",
    "trying the car door",
    "trying a car door",
    "trying car doors",
    "looking through a window",
    "looking into a window",
    "looking into a car",
    "looking into a vehicle",
    "looking into vehicles",
    "peering into",
    "taking a package",
    "picking up a package",
    "stealing",
    "carrying items away",
)


DEFAULT_WATCHING_ACTIONS = ("taking a photo", "photographing", "filming")


def normalise_label(text: str) -> str:
    """Lower case, single spaces: how labels and vocabulary entries are compared."""
    return " ".join(text.lower().replace("_", " ").split())


# EvidenceRules field <- the setting that overrides it (EvidenceRules.from_settings); an unset list keeps the built-in
_LIST_SETTINGS = (
    ("weapon_labels", "EVIDENCE_WEAPON_LABELS"),
    ("tool_labels", "EVIDENCE_TOOL_LABELS"),
    ("forcing_actions", "EVIDENCE_HOSTILE_ACTIONS"),
    ("probing_actions", "EVIDENCE_PROBING_ACTIONS"),
)
_VALUE_SETTINGS = (
    ("violence_threshold", "EVIDENCE_VIOLENCE_THRESHOLD"),
    ("violence_min_frames", "EVIDENCE_VIOLENCE_MIN_FRAMES"),
    ("night_start_hour", "EVIDENCE_NIGHT_START_HOUR"),
    ("night_end_hour", "EVIDENCE_NIGHT_END_HOUR"),
    ("loiter_seconds", "EVIDENCE_LOITER_SECONDS"),
    ("known_plates", "KNOWN_PLATES"),
)


@dataclass(frozen=True)
class EvidenceRules:
    """The floor's vocabularies and thresholds (the EVIDENCE_* settings override some: `from_settings`)."""

    weapon_labels: tuple[str, ...] = DEFAULT_WEAPON_LABELS
    tool_labels: tuple[str, ...] = DEFAULT_TOOL_LABELS
    weapon_min_confidence: float = 0.5
    weapon_min_detections: int = 2
    forcing_actions: tuple[str, ...] = DEFAULT_FORCING_ACTIONS
    probing_actions: tuple[str, ...] = DEFAULT_PROBING_ACTIONS
    watching_actions: tuple[str, ...] = DEFAULT_WATCHING_ACTIONS
    action_min_score: float = 0.5
    action_min_frames: int = 2
    violence_threshold: float = 0.6
    violence_min_frames: int = 2
    night_start_hour: int = 23
    night_end_hour: int = 5
    loiter_seconds: float = 60.0
    presence_min_confidence: float = 0.5
    known_plates: tuple[str, ...] = ()  # the household's plates (KNOWN_PLATES; profiles add resident_vehicles)

    @classmethod
    def from_settings(cls, settings: Any) -> EvidenceRules:
        """The EVIDENCE_* settings (HsiSettings, read by name: core never imports settings); an unset list keeps
        the built-in one."""
        built_in = cls()
        lists = {name: getattr(settings, setting) or getattr(built_in, name) for name, setting in _LIST_SETTINGS}
        values = {name: getattr(settings, setting) for name, setting in _VALUE_SETTINGS}
        return cls(**lists, **values)

    def __post_init__(self) -> None:
        for plate in self.known_plates:
            problem = plate_problem(plate)
            if problem:
                raise ValueError(f"EvidenceRules.known_plates: {problem}")
        for name in ("weapon_min_confidence", "action_min_score", "violence_threshold", "presence_min_confidence"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"EvidenceRules.{name} must be between 0 and 1, got {getattr(self, name)}")
        for name in ("weapon_min_detections", "action_min_frames", "violence_min_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"EvidenceRules.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("night_start_hour", "night_end_hour"):
            if not 0 <= getattr(self, name) <= 23:
                raise ValueError(f"EvidenceRules.{name} must be an hour 0-23, got {getattr(self, name)}")

    def is_night(self, hour: int) -> bool:
        start, end = self.night_start_hour, self.night_end_hour
        return start <= hour < end if start <= end else hour >= start or hour < end

    @staticmethod
    def matches(label: str, vocabulary: Iterable[str]) -> str | None:
        """The vocabulary entry the label is (or begins with, as a whole phrase), else None."""
        text = normalise_label(label)
        for entry in vocabulary:
            key = normalise_label(entry)
            if key and (text == key or text.startswith(key + " ")):
                return entry
        return None


@dataclass(frozen=True)
class Floor:
    score: int  # 0 when no rule fires
    level: str  # core.prompt.risk_schema.level_for_score(score)
    reasons: tuple[str, ...]  # one line per rule that fired, naming the fields it read
    ignored: tuple[str, ...]  # malformed inputs ignored, each naming the detection and field


# ----------------------------------------------------------------------------------------------- reading the context
@dataclass
class _Actor:
    """What the floor knows about one track (or one untracked detection)."""

    key: str
    label: str = "unknown"
    known: bool = False
    zones: set[str] = field(default_factory=set)  # current zones here and the zones the track entered (Frigate)
    dwell_s: float = 0.0  # the longest of its span here and its time tracked (Frigate's start_time)
    confidence: float = 1.0
    plates: tuple[str, ...] = ()
    known_plate: str | None = None
    delivery: str | None = None


def _who(obs: Observation) -> str:
    return f"track {obs.track_id}" if obs.track_id else f"detection {', '.join(obs.detection_ids[:3])}"


def _key(obs: Observation) -> str:
    return f"t:{obs.track_id}" if obs.track_id else f"d:{obs.detection_ids[0] if obs.detection_ids else '?'}"


class _Reader:
    """Typed views of the context; wrong types and out-of-range numbers are recorded in `ignored`."""

    def __init__(self, context: EnrichedContext, known_plates: Iterable[str] = ()) -> None:
        self.context = context
        self.ignored: list[str] = []
        self.actors: dict[str, _Actor] = {}
        household = {normalise_plate(p) for p in known_plates if p}
        for track in context.detections.tracks:
            label = next(iter(track.labels), "unknown")
            known_plate = next((p for p in track.plates if normalise_plate(p) in household), None)
            self.actors[f"t:{track.track_id}"] = _Actor(
                f"t:{track.track_id}",
                label,
                zones=set(track.zones) | set(track.entered_zones),
                dwell_s=max(track.dwell_s, track.tracked_s),
                confidence=track.max_confidence,
                plates=tuple(track.plates),
                known_plate=known_plate,
                delivery=track.delivery,
            )
        for item in context.detections.items:
            if item.track_id is None:
                zones = set(item.zones) or ({item.zone} if item.zone else set())
                self.actors[f"d:{item.detection_id}"] = _Actor(
                    f"d:{item.detection_id}", item.label, zones=zones, confidence=item.confidence
                )
        for obs in self.observations("reid"):
            known = self.boolean(obs, "reid", "known")
            actor = self.actors.get(_key(obs))
            if actor is not None and known is True:
                actor.known = True
        for obs in self.observations("reid"):  # a track also read as unknown is not known (a conflicting re-id)
            actor = self.actors.get(_key(obs))
            if actor is not None and obs.fields.get("known") is False:
                actor.known = False
        for actor in self.actors.values():  # a plate on the household's list is the household (KNOWN_PLATES, profile)
            if actor.known_plate is not None:
                actor.known = True

    def observations(self, kind: str) -> list[Observation]:
        return list(self.context.observations.get(kind, ()))

    def _ignore(self, obs: Observation, kind: str, name: str, why: str) -> None:
        line = f"{kind}.{name} of {_who(obs)}: {why}; ignored"
        if line not in self.ignored:
            self.ignored.append(line)

    def boolean(self, obs: Observation, kind: str, name: str) -> bool | None:
        if name in obs.numbers:
            self._ignore(obs, kind, name, f"expected true/false, got the number {obs.numbers[name].max:g}")
            return None
        if name not in obs.fields:
            return None
        value = obs.fields[name]
        if isinstance(value, bool):
            return value
        self._ignore(obs, kind, name, f"expected true/false, got {value!r}")
        return None

    def text(self, obs: Observation, kind: str, name: str) -> str | None:
        if name in obs.numbers:
            self._ignore(obs, kind, name, f"expected a label, got the number {obs.numbers[name].max:g}")
            return None
        value = obs.fields.get(name)
        if value is None and name in obs.fields:
            self._ignore(obs, kind, name, "expected a label, got null or a structure")
            return None
        if isinstance(value, bool):
            self._ignore(obs, kind, name, f"expected a label, got {value!r}")
            return None
        return value

    def unit_number(self, obs: Observation, kind: str, name: str) -> NumberRange | None:
        """A 0..1 reading (a score); out of range or not a number -> ignored."""
        if name in obs.fields:
            self._ignore(obs, kind, name, f"expected a number 0-1, got {obs.fields[name]!r}")
        reading = obs.numbers.get(name)
        if reading is None:
            return None
        values = (reading.min, reading.max, *reading.top)
        if not all(math.isfinite(v) and 0 <= v <= 1 for v in values):
            self._ignore(obs, kind, name, f"expected a number 0-1, got {reading.min:g}..{reading.max:g}")
            return None
        return reading

    def actor(self, obs: Observation) -> _Actor:
        return self.actors.get(_key(obs)) or _Actor(_key(obs), obs.label)

    def people(self) -> list[_Actor]:
        return [a for a in self.actors.values() if a.label == "person"]


def frames_at_or_above(reading: NumberRange, count: int, threshold: float) -> int:
    """How many readings of an observation reached `threshold`, as far as the summary can tell (a lower bound when
    the observation has more frames than `top` keeps and all kept ones reached it)."""
    if reading.min >= threshold:
        return count
    if reading.top:
        return sum(value >= threshold for value in reading.top)
    # A context stored before `top` existed: first, last and max are three readings we know.
    known = [reading.first, reading.last] if count >= 2 else [reading.max]
    return max(sum(v >= threshold for v in known), int(reading.max >= threshold))


def _local_hour(context: EnrichedContext, profile: CameraProfile | None) -> tuple[int, str]:
    zone_name = profile.timezone if profile is not None else context.detections.timezone
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone, zone_name = ZoneInfo("UTC"), "UTC"
    moment: datetime = context.detections.first_ts or context.batch.started_at
    return moment.astimezone(zone).hour, zone_name


# ----------------------------------------------------------------------------------------------- the rules
class _Fired:
    """The rules that fired; `reasons()` puts the deciding (highest) one first, the lifted ones last."""

    def __init__(self) -> None:
        self.score = 0
        self._fired: list[tuple[int, str, str]] = []  # (score, rule, reason)
        self._notes: list[str] = []

    def add(self, score: int, reason: str) -> None:
        """`reason` begins with the rule's name and a colon ("person at night: ...")."""
        self.score = max(self.score, score)
        self._fired.append((score, _rule_of(reason), f"{reason} -> {score} {level_for_score(score)}"))

    def rules(self) -> set[str]:
        return {rule for _, rule, _ in self._fired}

    def lift(self, rules: Iterable[str], why: str) -> None:
        """Drop `rules` from the score, keeping each in the reasons with `why`."""
        lifted = set(rules)
        kept = [item for item in self._fired if item[1] not in lifted]
        self._notes += [
            f"{reason.rsplit(' -> ', 1)[0]} -> lifted: {why}" for _, rule, reason in self._fired if rule in lifted
        ]
        self._fired = kept
        self.score = max((score for score, _, _ in kept), default=0)

    def note(self, line: str) -> None:
        self._notes.append(line)

    def reasons(self) -> tuple[str, ...]:
        fired = tuple(reason for _, _, reason in sorted(self._fired, key=lambda item: -item[0]))
        return fired + tuple(self._notes)


def _rule_of(reason: str) -> str:
    """The rule's name: its reason up to the colon, "person at night on a camera without a profile" counted as
    "person at night" (the same presence rule, zones unplaced)."""
    name = reason.split(":", 1)[0]
    return "person at night" if name.startswith("person at night") else name


def _labelled(context: EnrichedContext, labels: Sequence[str], min_confidence: float) -> dict[str, list[str]]:
    """Detector labels are matched whole (a `knife` detection, not a `knife block`)."""
    wanted = {normalise_label(label) for label in labels}
    found: dict[str, list[str]] = {}
    for item in context.detections.items:
        if normalise_label(item.label) in wanted and item.confidence >= min_confidence:
            found.setdefault(item.label, []).append(item.detection_id)
    return found


def _weapon_and_tool(context: EnrichedContext, reader: _Reader, rules: EvidenceRules, fired: _Fired) -> None:
    for label, ids in _labelled(context, rules.weapon_labels, rules.weapon_min_confidence).items():
        if len(ids) >= rules.weapon_min_detections:
            fired.add(
                CRITICAL,
                f"weapon: detections.label {label!r} on {len(ids)} detections ({', '.join(ids[:3])}) at confidence "
                f">= {rules.weapon_min_confidence}",
            )
    strangers = [a for a in reader.people() if not a.known]
    if not strangers:
        return
    for label, ids in _labelled(context, rules.tool_labels, rules.weapon_min_confidence).items():
        fired.add(
            HIGH,
            f"tool: detections.label {label!r} ({', '.join(ids[:3])}) with a person not re-identified as known "
            f"(reid.known, {strangers[0].key})",
        )


def _violence(reader: _Reader, rules: EvidenceRules, fired: _Fired) -> None:
    for obs in reader.observations("violence"):
        reading = reader.unit_number(obs, "violence", "score")
        if reading is None:
            continue
        frames = frames_at_or_above(reading, obs.count, rules.violence_threshold)
        if frames >= rules.violence_min_frames:
            fired.add(
                CRITICAL,
                f"violence: violence.score >= {rules.violence_threshold} on {frames} of {obs.count} frames of "
                f"{_who(obs)} (max {reading.max:.2f})",
            )


_NO_DAMAGE = frozenset({"", "none", "no", "no damage", "false", "unknown", "n/a"})


def _vehicle_damage(reader: _Reader) -> str | None:
    """The first vehicle reading that reports damage (`vehicle.damage` true, or a reading other than none/no)."""
    for obs in reader.observations("vehicle"):
        value = obs.fields.get("damage")
        if value is True or (isinstance(value, str) and normalise_label(value) not in _NO_DAMAGE):
            return f"vehicle.damage {value!r} on {_who(obs)}"
    return None


def _corroboration(reader: _Reader, actor: _Actor, rules: EvidenceRules) -> str | None:
    """What makes an act seen on ONE frame evidence: vehicle damage in the batch, or a second person not known
    (an accomplice). One noisy frame alone is not enough; one frame with either is."""
    damage = _vehicle_damage(reader)
    if damage:
        return damage
    others = [
        a
        for a in reader.people()
        if a.key != actor.key and not a.known and a.confidence >= rules.presence_min_confidence
    ]
    return f"a second person not known ({others[0].key})" if others else None


def _actions(reader: _Reader, zones: WatchedZones, rules: EvidenceRules, fired: _Fired) -> None:
    for obs in reader.observations("action"):
        label = reader.text(obs, "action", "label")
        score = reader.unit_number(obs, "action", "score")
        if not label:
            continue
        if score is not None and score.max < rules.action_min_score:
            continue
        actor = reader.actor(obs)
        if obs.count < rules.action_min_frames:
            _single_frame_act(reader, obs, label, actor, rules, fired)
            continue
        seen = f"action.label {label!r} on {obs.count} frames of {_who(obs)}"
        if rules.matches(label, rules.forcing_actions):
            at_entry = sorted(actor.zones & zones.entry)
            if at_entry:
                fired.add(CRITICAL, f"forcing: {seen} at entry zone {at_entry[0]!r} (zone, {zones.basis()})")
            else:
                fired.add(FORCING_ELSEWHERE, f"forcing: {seen}, not at an entry zone")
        elif rules.matches(label, rules.probing_actions) and not actor.known:
            fired.add(HIGH, f"probing: {seen}, not re-identified as known (reid.known)")
        elif rules.matches(label, rules.watching_actions) and not actor.known:
            fired.add(MEDIUM, f"watching: {seen}, not re-identified as known (reid.known)")


def _single_frame_act(
    reader: _Reader, obs: Observation, label: str, actor: _Actor, rules: EvidenceRules, fired: _Fired
) -> None:
    """A forcing or probing act on fewer frames than action_min_frames counts only when corroborated, and then as
    high at most (an alert; critical needs the act sustained)."""
    forcing = rules.matches(label, rules.forcing_actions)
    probing = rules.matches(label, rules.probing_actions) and not actor.known
    if not (forcing or probing):
        return
    corroborated = _corroboration(reader, actor, rules)
    if corroborated is None:
        return
    seen = f"action.label {label!r} on {obs.count} frame of {_who(obs)}, corroborated by {corroborated}"
    if forcing:
        fired.add(FORCING_ELSEWHERE, f"forcing: {seen}")
    else:
        fired.add(HIGH, f"probing: {seen}, not re-identified as known (reid.known)")


def _presence(
    reader: _Reader, zones: WatchedZones, rules: EvidenceRules, hour: int, zone_name: str, fired: _Fired
) -> None:
    night = rules.is_night(hour)
    suspicious_keys = set()
    for obs in reader.observations("clothing"):
        if reader.boolean(obs, "clothing", "suspicious") is True:
            suspicious_keys.add(_key(obs))
    when = f"local hour {hour:02d} ({zone_name})"
    dark = reader.context.detections.is_dark
    for actor in reader.actors.values():
        if actor.known or actor.confidence < rules.presence_min_confidence:
            continue
        who = f"{actor.label} {actor.key} not re-identified as known (reid.known)"
        watched = zones.watched(actor.zones)
        if not watched:
            if actor.label == "person" and night and zones.unplaced(actor.zones):
                where = f"zone(s) {', '.join(sorted(actor.zones))} not placed" if actor.zones else "no zone"
                fired.add(
                    MEDIUM,
                    f"person at night on a camera without a profile: {who}, {where} (no entry or private zone "
                    f"known: where on the property is not known), {when}",
                )
            continue
        if actor.label == "person" and night:
            masked = ", clothing.suspicious true" if actor.key in suspicious_keys else ""
            courier = (
                f", courier logo {actor.delivery!r} (attributes: a uniform, not an identity)" if actor.delivery else ""
            )
            kind = "entry" if watched[0] in zones.entry else "private"
            guessed = f" ({zones.basis()})" if zones.guessed else ""
            fired.add(HIGH, f"person at night: {who}{masked}{courier} on {kind} zone {watched[0]!r}{guessed}, {when}")
        elif night and actor.label not in _ANIMALS:
            plate = f", plate {actor.plates[0]!r} not a known plate" if actor.plates else ""
            fired.add(MEDIUM, f"vehicle or object at night: {who}{plate} on zone {watched[0]!r}, {when}")
        if actor.label == "person" and dark and actor.dwell_s >= rules.loiter_seconds:
            fired.add(
                MEDIUM,
                f"loitering in the dark: {who} stays {actor.dwell_s:.0f} s (track dwell, Frigate's start_time) on zone "
                f"{watched[0]!r}, "
                f"detections.is_dark (scene.lighting / local hour)",
            )


_ANIMALS = frozenset({"cat", "dog", "bird", "fox", "deer", "hedgehog", "badger", "horse", "sheep", "cow", "animal"})


def _history(
    reader: _Reader,
    zones: WatchedZones,
    history: HistoryFacts,
    rules: EvidenceRules,
    hour: int,
    fired: _Fired,
) -> None:
    strangers = [a for a in reader.people() if not a.known]
    if not strangers:
        return
    watched = set(zones.entry | zones.private)
    on_watched = [a for a in strangers if a.zones & watched]
    if "person" in history.unusual_labels and on_watched:
        fired.add(
            MEDIUM,
            f"unusual here: history.unusual_labels has 'person' at local hour {history.local_hour:02d} and "
            f"{on_watched[0].key} (not known) is on zone {sorted(on_watched[0].zones & watched)[0]!r}",
        )
    if len(history.path_to_entry) >= 2:
        score = HIGH if rules.is_night(hour) else MEDIUM
        fired.add(
            score,
            f"path to entry: history.path_to_entry {' -> '.join(history.path_to_entry)} ends here with a person not "
            f"known ({strangers[0].key}), local hour {hour:02d}",
        )
    alerts = [event for event in history.recent_activity if event.risk_level in ALERT_LEVELS]
    if alerts:
        event = alerts[-1]
        fired.add(
            HIGH,
            f"after an alert: history.recent_activity: camera {event.camera_id!r} was {event.risk_level} "
            f"{event.seconds_before:.0f} s before, and a person not known ({strangers[0].key}) is here",
        )


def _unknown_person_at_entry(reader: _Reader, zones: WatchedZones, rules: EvidenceRules, hour: int) -> str | None:
    """The first person not known (at the presence rules' confidence) on an entry zone in the night hours."""
    if not rules.is_night(hour):
        return None
    for actor in reader.people():
        if not actor.known and actor.confidence >= rules.presence_min_confidence and actor.zones & zones.entry:
            return f"{actor.key} on entry zone {sorted(actor.zones & zones.entry)[0]!r}"
    return None


def _setting(
    context: EnrichedContext, profile: CameraProfile | None, rules: EvidenceRules
) -> tuple[_Reader, WatchedZones, int, str]:
    """What every rule reads: the actors, the zones' roles, the local hour and its zone name."""
    profile = profile if profile is not None else context.camera_profile
    plates = [*rules.known_plates, *(v.plate for v in profile.resident_vehicles if v.plate)] if profile else []
    reader = _Reader(context, plates or rules.known_plates)
    hour, zone_name = _local_hour(context, profile)
    zones = watched_zones(profile, (zone for actor in reader.actors.values() for zone in actor.zones))
    return reader, zones, hour, zone_name


def unknown_person_at_entry_at_night(
    context: EnrichedContext, profile: CameraProfile | None, rules: EvidenceRules | None = None
) -> bool:
    """Whether the floor sees a person not known on an entry zone in the night hours (the zone roles, night hours
    and "known" of `evidence_floor`): such a batch is never part of a household exception without an identity."""
    rules = rules or EvidenceRules()
    reader, zones, hour, _ = _setting(context, profile, rules)
    return _unknown_person_at_entry(reader, zones, rules, hour) is not None


def _apply_exceptions(
    context: EnrichedContext,
    reader: _Reader,
    zones: WatchedZones,
    rules: EvidenceRules,
    hour: int,
    exceptions: Sequence[HouseholdException],
    at: datetime,
    fired: _Fired,
) -> None:
    pattern = batch_pattern(context)
    exception = exception_for(exceptions, pattern, at)
    presence = fired.rules() & EXEMPTIBLE_RULES
    if exception is None or not presence:
        return
    who = _unknown_person_at_entry(reader, zones, rules, hour)
    if who is not None and not pattern.identities:
        fired.note(
            f"household exception {pattern.key} not applied: a person not known ({who}) at night, and no "
            "recognised identity in the pattern"
        )
        return
    fired.lift(presence, exception.explain())


def evidence_floor(
    context: EnrichedContext,
    profile: CameraProfile | None,
    history: HistoryFacts | None = None,
    rules: EvidenceRules | None = None,
    exceptions: Sequence[HouseholdException] = (),
    at: datetime | None = None,
) -> Floor:
    """The floor of one batch (or of the detections seen so far): the rules above, never an exception on bad
    enrichment. `profile` None (and none in the context): the zones' roles are guessed from their names
    (core/verdict/watched_zones.py). `exceptions`: the household exceptions in force at `at` (the moment of
    judgement; the batch's end when None), which may lift the presence rules only."""
    rules = rules or EvidenceRules()
    reader, zones, hour, zone_name = _setting(context, profile, rules)
    fired = _Fired()
    _weapon_and_tool(context, reader, rules, fired)
    _violence(reader, rules, fired)
    _actions(reader, zones, rules, fired)
    _presence(reader, zones, rules, hour, zone_name, fired)
    if history is not None:
        _history(reader, zones, history, rules, hour, fired)
    if exceptions:
        moment = at or context.detections.last_ts or context.batch.started_at
        _apply_exceptions(context, reader, zones, rules, hour, exceptions, moment, fired)
    return Floor(
        score=fired.score,
        level=level_for_score(fired.score),
        reasons=fired.reasons(),
        ignored=tuple(reader.ignored),
    )
