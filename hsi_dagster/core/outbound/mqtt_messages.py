"""What hsi publishes on MQTT, as plain values: topics, the per-camera state, events, Home Assistant discovery.

Topics (prefix MQTT_TOPIC_PREFIX, default `hsi`; discovery prefix MQTT_DISCOVERY_PREFIX, default `homeassistant`):
- `<prefix>/availability`: `online` / `offline`, retained; `offline` is the connection's last will.
- `<prefix>/<camera>/state`: retained JSON of the camera's latest verdict (level, score, summary, reasons, batch).
- `<prefix>/<camera>/event`: not retained; one JSON per high/critical verdict and per evidence-only alert.
- `<discovery>/{sensor,binary_sensor,button}/hsi_<camera>/<entity>/config`: retained Home Assistant discovery, one
  device per camera (risk level, risk score, last summary, threat; buttons "False alarm" and "Real threat"); an empty
  retained payload removes an entity.
- `<prefix>/<camera>/correction`: the household's corrections in (core/outbound/corrections.py), JSON
  `{"batch_id", "level", "note"}`; the buttons send `"batch_id": "latest"` (the camera's newest verdict).

Camera names are untrusted text: `camera_key` makes the topic level and the ids safe (see there), and every text
field goes through `clean_text` (no lone surrogates, no control characters, cut to a bound), so a payload is
always valid UTF-8 JSON that Home Assistant's parser accepts.

Fields checked against Home Assistant's documentation (https://www.home-assistant.io/integrations/sensor.mqtt/,
https://www.home-assistant.io/integrations/binary_sensor.mqtt/, https://www.home-assistant.io/integrations/mqtt/
"MQTT Discovery"): `unique_id`, `name`, `state_topic`, `value_template`, `json_attributes_topic`,
`availability_topic` / `payload_available` / `payload_not_available`, `device` (`identifiers`, `name`,
`manufacturer`, `model`), `origin` (`name`), `qos`; sensor `device_class: enum` with `options`, sensor
`state_class: measurement`; binary sensor `payload_on` / `payload_off` and `device_class: safety` (on = unsafe); button
(https://www.home-assistant.io/integrations/button.mqtt/) `command_topic`, `payload_press`, `retain`. A sensor's
state is at most 255 characters in Home Assistant, so the summary entity gets the summary cut to that.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS
from hsi_dagster.core.verdict.alerts import already_alerted
from hsi_dagster.core.verdict.trust import untrusted_note

THREAT_LEVELS = frozenset({"high", "critical"})
HA_STATE_MAX_CHARS = 255  # Home Assistant rejects a longer state (the entity would turn "unknown")
REASON_MAX_CHARS = 200
MAX_REASONS = 10
CAMERA_SLUG_MAX_CHARS = 48
DISPLAY_NAME_MAX_CHARS = 64
TOPIC_PREFIX_MAX_CHARS = 128
AVAILABLE, NOT_AVAILABLE = "online", "offline"
THREAT_ON, THREAT_OFF = "ON", "OFF"
MANUFACTURER = "hsi-dagster"

_SLUG_SAFE = re.compile(f"[A-Za-z0-9_-]{{1,{CAMERA_SLUG_MAX_CHARS}}}")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class TopicError(ValueError):
    """A topic prefix MQTT or Home Assistant cannot use; the message says which character or level."""


# ------------------------------------------------------------------------------------------------ text
def clean_text(value: object, limit: int) -> str:
    """`value` as text safe for a JSON payload: lone surrogates (undecodable bytes) become U+FFFD, control characters
    (but newline and tab) are dropped, and text over `limit` characters is cut to `limit - 1` plus an ellipsis."""
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else "" if value is None else str(value)
    text = _CONTROL.sub("", _SURROGATE.sub("\ufffd", text))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _raw_bytes(value: str | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    try:  # a name decoded with surrogateescape (os.fsdecode) gets its original bytes back
        return value.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", errors="surrogatepass")


# ------------------------------------------------------------------------------------------------ topics
def topic_prefix_problem(value: str) -> str | None:
    """Why MQTT cannot publish under this prefix, or None: wildcards (`+`, `#`) are for subscriptions only, `$`
    starts the broker's own topics, NUL and empty levels are invalid, lone surrogates are not UTF-8."""
    prefix = str(value).strip().strip("/")
    if not prefix:
        return "empty"
    for char, why in (("+", "a wildcard"), ("#", "a wildcard"), ("\x00", "NUL")):
        if char in prefix:
            return f"contains {why} ({char!r}): a publish topic cannot"
    if prefix.startswith("$"):
        return "starts with '$': such topics belong to the broker"
    if "//" in prefix:
        return "has an empty topic level ('//')"
    if _has_surrogates(prefix) or len(prefix) > TOPIC_PREFIX_MAX_CHARS:
        return f"not UTF-8 text of at most {TOPIC_PREFIX_MAX_CHARS} characters"
    return None


def check_topic_prefix(value: str, setting: str) -> str:
    """The prefix without leading/trailing slashes; TopicError naming `setting` when it cannot be used."""
    problem = topic_prefix_problem(value)
    if problem:
        raise TopicError(f"{setting}={value!r}: {problem}")
    return str(value).strip().strip("/")


@dataclass(frozen=True)
class CameraKey:
    """A camera as MQTT and Home Assistant see it. `slug` is the topic level and the id part: the camera id when it
    is made of [A-Za-z0-9_-] only (the usual Frigate and contract names), else its ASCII transliteration with every
    other run of characters as `_`, cut to 48 characters, plus `_` and 8 hex digits of the SHA-256 of the original
    bytes, so two different names never share a slug. `name` is the display name (cleaned, at most 64 characters)."""

    camera_id: str
    slug: str
    name: str


def camera_key(camera_id: str | bytes) -> CameraKey:
    raw = _raw_bytes(camera_id)
    original = camera_id if isinstance(camera_id, str) else raw.decode("utf-8", errors="surrogateescape")
    name = clean_text(original, DISPLAY_NAME_MAX_CHARS) or "camera"
    if _SLUG_SAFE.fullmatch(original):
        return CameraKey(original, original, name)
    ascii_text = unicodedata.normalize("NFKD", name).encode("ascii", errors="ignore").decode("ascii")
    base = _SLUG_UNSAFE.sub("_", ascii_text).strip("_")[:CAMERA_SLUG_MAX_CHARS] or "camera"
    digest = hashlib.sha256(raw).hexdigest()[:8]
    return CameraKey(original, f"{base}_{digest}", name)


@dataclass(frozen=True)
class Topics:
    """The topic names under the two (already checked) prefixes."""

    prefix: str
    discovery_prefix: str

    @property
    def availability(self) -> str:
        return f"{self.prefix}/availability"

    def state(self, camera: CameraKey) -> str:
        return f"{self.prefix}/{camera.slug}/state"

    def event(self, camera: CameraKey) -> str:
        return f"{self.prefix}/{camera.slug}/event"

    def correction(self, camera: CameraKey) -> str:
        return f"{self.prefix}/{camera.slug}/correction"

    @property
    def corrections(self) -> str:
        """The subscription of every camera's command topic."""
        return f"{self.prefix}/+/correction"

    def discovery(self, component: str, camera: CameraKey, entity: str) -> str:
        return f"{self.discovery_prefix}/{component}/hsi_{camera.slug}/{entity}/config"


# ------------------------------------------------------------------------------------------------ payloads
@dataclass(frozen=True)
class StoredVerdict:
    """One stored assessment as the publisher reads it (storage/mqtt_outbox.py)."""

    batch_id: str
    camera_id: str
    risk_level: str
    risk_score: int | None
    summary: str | None
    reasons: tuple[str, ...]
    window_start: datetime | None
    assessed_at: datetime
    floor_score: int | None = None
    model_score: int | None = None
    model_level: str | None = None  # the level of the model's own score (core/verdict/trust.py)
    model_trust: int | None = None  # the trust that applied to it
    trust_reason: str | None = None  # why that trust
    visit_id: str | None = None  # the visit across cameras the batch is part of (storage/visits.py)
    visit_cameras: tuple[str, ...] = ()
    visit_level: str | None = None  # the visit's own level
    evidence_level: str | None = None  # the highest evidence-only alert of its detections or its visit

    @property
    def is_threat(self) -> bool:
        return self.risk_level in THREAT_LEVELS

    @property
    def said_by_evidence(self) -> bool:
        """An evidence-only alert of the batch's detections or visit already was an event at this level or above:
        one event per visit and level (the retained state still shows the verdict)."""
        return already_alerted(self.risk_level, [("evidence", self.evidence_level or "")]) is not None

    @property
    def model_note(self) -> str | None:
        """ "model said critical; not trusted for this model: measured trust 0" when the model wanted more than is
        stored: Home Assistant and the phone show it beside the level, never a silent "low"."""
        return untrusted_note(self.model_level, self.risk_level, self.trust_reason)


@dataclass(frozen=True)
class StoredEvidenceAlert:
    """One evidence_alerts row (an alert decided by the evidence rules before any LLM verdict)."""

    alert_key: str
    camera_id: str
    risk_level: str
    risk_score: int | None
    reasons: tuple[str, ...]
    detected_at: datetime
    created_at: datetime
    track_id: str | None = None
    batch_id: str | None = None
    visit_alerted: str | None = None  # the alert its visit already sent at this level: no second event (issue 44)


def reasons_from(value: object) -> tuple[str, ...]:
    """Evidence reasons from a stored JSON list (or its text), cleaned and bounded; () when absent or malformed."""
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            return (clean_text(text, REASON_MAX_CHARS),) if text.strip() else ()
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return ()
    return tuple(clean_text(item, REASON_MAX_CHARS) for item in list(value)[:MAX_REASONS] if item)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def state_payload(verdict: StoredVerdict) -> dict[str, Any]:
    """The retained state of a camera: what the discovery entities read (value_json.level, .score, .summary,
    .threat) and, as attributes, the rest."""
    camera = camera_key(verdict.camera_id)
    return {
        "camera": camera.name,
        "level": verdict.risk_level if verdict.risk_level in RISK_LEVELS else None,
        "score": verdict.risk_score,
        "threat": THREAT_ON if verdict.is_threat else THREAT_OFF,
        "summary": clean_text(verdict.summary or "; ".join(verdict.reasons), HA_STATE_MAX_CHARS),
        "reasons": list(verdict.reasons),
        "floor_score": verdict.floor_score,
        "model_score": verdict.model_score,
        "model_level": verdict.model_level,
        "model_trust": verdict.model_trust,
        "model_note": clean_text(verdict.model_note, HA_STATE_MAX_CHARS) if verdict.model_note else None,
        "batch_id": clean_text(verdict.batch_id, 200),
        "visit_id": clean_text(verdict.visit_id, 200) if verdict.visit_id else None,
        "visit_cameras": [clean_text(camera, 64) for camera in verdict.visit_cameras],
        "visit_level": verdict.visit_level if verdict.visit_level in RISK_LEVELS else None,
        "window_start": _iso(verdict.window_start),
        "assessed_at": _iso(verdict.assessed_at),
    }


def verdict_event_payload(verdict: StoredVerdict) -> dict[str, Any]:
    """An event for a high or critical verdict; `event_id` is stable per batch (a consumer can drop a repeat), and per
    visit and level for a batch of a visit across cameras (one event per visit, a new one when it escalates)."""
    event_id = f"verdict:{verdict.batch_id}"
    if verdict.visit_id and len(verdict.visit_cameras) >= 2:
        event_id = f"visit:{verdict.visit_id}:{verdict.risk_level}"
    return {"event_id": event_id, "kind": "verdict", **state_payload(verdict)}


def evidence_event_payload(alert: StoredEvidenceAlert) -> dict[str, Any]:
    """An event for an evidence-only alert (before, or without, the LLM's verdict on its batch)."""
    camera = camera_key(alert.camera_id)
    return {
        "event_id": f"evidence:{alert.alert_key}",
        "kind": "evidence",
        "camera": camera.name,
        "level": alert.risk_level if alert.risk_level in RISK_LEVELS else None,
        "score": alert.risk_score,
        "threat": THREAT_ON if alert.risk_level in THREAT_LEVELS else THREAT_OFF,
        "summary": clean_text("; ".join(alert.reasons), HA_STATE_MAX_CHARS),
        "reasons": list(alert.reasons),
        "track_id": clean_text(alert.track_id, 200) if alert.track_id else None,
        "batch_id": clean_text(alert.batch_id, 200) if alert.batch_id else None,
        "detected_at": _iso(alert.detected_at),
        "created_at": _iso(alert.created_at),
    }


def encode(payload: Mapping[str, Any] | str | None) -> bytes:
    """Compact UTF-8 JSON (a str is sent as it is; None = the empty payload that deletes a retained message)."""
    if payload is None:
        return b""
    if isinstance(payload, str):
        return payload.encode("utf-8")
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


# ------------------------------------------------------------------------------------------------ discovery
@dataclass(frozen=True)
class Message:
    """One MQTT publish."""

    topic: str
    payload: bytes
    retain: bool
    camera_id: str | None = None


@dataclass(frozen=True)
class _Entity:
    component: str
    entity: str
    name: str
    extra: Mapping[str, Any] = field(default_factory=dict)


_ENTITIES = (
    _Entity(
        "sensor",
        "risk_level",
        "Risk level",
        {"value_template": "{{ value_json.level }}", "device_class": "enum", "options": list(RISK_LEVELS)},
    ),
    _Entity(
        "sensor", "risk_score", "Risk score", {"value_template": "{{ value_json.score }}", "state_class": "measurement"}
    ),
    _Entity("sensor", "last_summary", "Last summary", {"value_template": "{{ value_json.summary }}"}),
    _Entity(
        "binary_sensor",
        "threat",
        "Threat",
        {
            "value_template": "{{ value_json.threat }}",
            "payload_on": THREAT_ON,
            "payload_off": THREAT_OFF,
            "device_class": "safety",
        },
    ),
)


# The buttons act on the camera's latest verdict: "latest" is resolved when the correction arrives (the verdict
# publisher's session, sensors/correction_commands.py).
_BUTTONS = (
    ("false_alarm", "False alarm", "low"),
    ("real_threat", "Real threat", "high"),
)


def button_press(level: str, name: str) -> str:
    return json.dumps(
        {"batch_id": "latest", "level": level, "note": f"Home Assistant button: {name}"}, separators=(",", ":")
    )


def discovery_messages(camera: CameraKey, topics: Topics) -> list[Message]:
    """The retained discovery configs of one camera's device (4 entities that show the verdict, 2 buttons that
    correct the latest one)."""
    device = {
        "identifiers": [f"hsi_{camera.slug}"],
        "name": f"hsi {camera.name}",
        "manufacturer": MANUFACTURER,
        "model": "Risk assessment",
    }
    shared = {
        "availability_topic": topics.availability,
        "payload_available": AVAILABLE,
        "payload_not_available": NOT_AVAILABLE,
        "device": device,
        "origin": {"name": MANUFACTURER},
        "qos": 1,
    }
    messages = []
    for entity in _ENTITIES:
        config = {
            "name": entity.name,
            "unique_id": f"hsi_{camera.slug}_{entity.entity}",
            "state_topic": topics.state(camera),
            "json_attributes_topic": topics.state(camera),
            **shared,
            **entity.extra,
        }
        topic = topics.discovery(entity.component, camera, entity.entity)
        messages.append(Message(topic, encode(config), retain=True, camera_id=camera.camera_id))
    for button, name, level in _BUTTONS:
        config = {
            "name": name,
            "unique_id": f"hsi_{camera.slug}_{button}",
            "command_topic": topics.correction(camera),
            "payload_press": button_press(level, name),
            "retain": False,
            **shared,
        }
        topic = topics.discovery("button", camera, button)
        messages.append(Message(topic, encode(config), retain=True, camera_id=camera.camera_id))
    return messages


def removal_messages(topics_to_clear: Iterable[str], camera_id: str) -> list[Message]:
    """Empty retained payloads: Home Assistant removes the entities, the broker drops the retained state."""
    return [Message(topic, b"", retain=True, camera_id=camera_id) for topic in topics_to_clear]


def camera_topics(camera: CameraKey, topics: Topics) -> list[str]:
    """Every retained topic a camera owns (its discovery configs and its state), for removal."""
    return [message.topic for message in discovery_messages(camera, topics)] + [topics.state(camera)]


# ------------------------------------------------------------------------------------------------ planning
@dataclass(frozen=True)
class Unit:
    """The messages that complete one outbox row (one verdict or one evidence alert), published in this order."""

    key: str
    camera_id: str
    batch_id: str | None
    sent: str  # state, event, state+event, or superseded (nothing left to send: a newer verdict holds the state)
    window_start: datetime | None
    messages: tuple[Message, ...]


def _moment(item: StoredVerdict | StoredEvidenceAlert) -> datetime:
    if isinstance(item, StoredEvidenceAlert):
        return item.detected_at
    return item.window_start or item.assessed_at


def plan_camera(
    camera_id: str,
    verdicts: Sequence[StoredVerdict],
    alerts: Sequence[StoredEvidenceAlert],
    retained_window: datetime | None,
    topics: Topics,
) -> list[Unit]:
    """One camera's pending verdicts and alerts as units, oldest first. Every high/critical verdict and every
    evidence alert is an event; only the newest verdict goes to the retained state, and only when its window is not
    older than the one already there: after an outage the entities show now, not a replay of the night (the events
    carry every verdict, with its time)."""
    camera = camera_key(camera_id)
    newest = max(verdicts, key=lambda v: (v.window_start or v.assessed_at, v.assessed_at), default=None)
    items: list[StoredVerdict | StoredEvidenceAlert] = sorted([*verdicts, *alerts], key=_moment)
    units = []
    for item in items:
        if isinstance(item, StoredEvidenceAlert):
            if item.visit_alerted is not None:  # one alert per visit and level: recorded, not sent again
                units.append(
                    Unit(f"evidence:{item.alert_key}", camera_id, item.batch_id, "visit already alerted", None, ())
                )
                continue
            event = Message(
                topics.event(camera), encode(evidence_event_payload(item)), retain=False, camera_id=camera_id
            )
            units.append(Unit(f"evidence:{item.alert_key}", camera_id, item.batch_id, "event", None, (event,)))
            continue
        messages, sent = [], []
        if item.is_threat and not item.said_by_evidence:
            messages.append(Message(topics.event(camera), encode(verdict_event_payload(item)), False, camera_id))
            sent.append("event")
        window = item.window_start or item.assessed_at
        if item is newest and (retained_window is None or window >= retained_window):
            messages.append(Message(topics.state(camera), encode(state_payload(item)), True, camera_id))
            sent.append("state")
        key = f"verdict:{item.batch_id}"
        units.append(Unit(key, camera_id, item.batch_id, "+".join(sent) or "superseded", window, tuple(messages)))
    return units


def discovery_digest(messages: Sequence[Message]) -> str:
    """A hash of a camera's discovery configs: sent again when it changes (prefix, names, fields)."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message.topic.encode() + b"\0" + message.payload + b"\0")
    return digest.hexdigest()


def initial_state_unit(verdict: StoredVerdict, topics: Topics) -> Unit:
    """A camera's newest verdict as its first retained state, without an event: entities that appear (publishing
    turned on, a camera added) show the last verdict at once, and no phone rings for an old one."""
    camera = camera_key(verdict.camera_id)
    state = Message(topics.state(camera), encode(state_payload(verdict)), True, verdict.camera_id)
    window = verdict.window_start or verdict.assessed_at
    return Unit(f"verdict:{verdict.batch_id}", verdict.camera_id, verdict.batch_id, "state", window, (state,))
