"""A household's correction of a stored verdict, checked before it is stored: pure rules, no storage.

A correction names a batch, a level of RISK_LEVELS and an optional note; it comes from the CLI (`hsi correct`),
MQTT (`<prefix>/<camera>/correction`, JSON `{"batch_id", "level", "note"}`; a Home Assistant button sends
`"batch_id": "latest"`, the camera's newest verdict at receipt) or a Dagster run (`correct_verdict` job). Whatever
is wrong is refused with a `Refusal` naming the field and why; nothing here raises on any input.

A correction is a stored label: until household exceptions exist it changes no later verdict. It is bounded:
a note of at most NOTE_MAX_CHARS, an MQTT payload of at most PAYLOAD_MAX_BYTES, and per camera at most
`per_hour` MQTT corrections in the last hour (`rate_refusal`, CORRECTIONS_PER_CAMERA_PER_HOUR).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from hsi_dagster.core.outbound.mqtt_messages import camera_key
from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS

SOURCES = ("cli", "mqtt", "dagster")
LATEST = "latest"  # the camera's newest verdict (the Home Assistant buttons)
NOTE_MAX_CHARS = 500
BATCH_ID_MAX_CHARS = 200
PAYLOAD_MAX_BYTES = 2048
LOWER, HIGHER, CONFIRMED = "lower", "higher", "confirmed"  # which way a correction went


@dataclass(frozen=True)
class Refusal:
    """Why a correction was not stored: `field` names what was wrong (batch_id, level, note, camera, payload)."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class CorrectionRefused(ValueError):
    """A correction that cannot be stored; `.refusal` says which field and why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


@dataclass(frozen=True)
class CorrectionRequest:
    """A correction whose own fields are valid; the batch is not looked up yet (`batch_id` may be LATEST)."""

    batch_id: str
    level: str
    note: str | None
    source: str


@dataclass(frozen=True)
class CorrectedVerdict:
    """The stored verdict a correction corrects, as it was when the correction arrived."""

    batch_id: str
    camera_id: str
    risk_level: str | None
    risk_score: int | None
    assessed_at: datetime


@dataclass(frozen=True)
class Correction:
    """A correction ready to store: the request and the verdict it names."""

    request: CorrectionRequest
    verdict: CorrectedVerdict

    @property
    def direction(self) -> str:
        return direction(self.verdict.risk_level, self.request.level)


def direction(stored_level: str | None, corrected_level: str) -> str:
    """`lower` (a false alarm), `higher` (a missed threat) or `confirmed`; a stored level outside RISK_LEVELS (an
    assessment without a verdict) counts as lower than any level."""
    stored = RISK_LEVELS.index(stored_level) if stored_level in RISK_LEVELS else -1
    corrected = RISK_LEVELS.index(corrected_level)
    return LOWER if corrected < stored else HIGHER if corrected > stored else CONFIRMED


def check_request(batch_id: object, level: object, note: object = None, *, source: str) -> CorrectionRequest:
    """The request's own fields checked; CorrectionRefused names the first bad one."""
    if source not in SOURCES:
        raise CorrectionRefused(Refusal("source", f"{source!r} is not one of {', '.join(SOURCES)}"))
    if not isinstance(batch_id, str) or not batch_id.strip():
        raise CorrectionRefused(Refusal("batch_id", "missing or not a string"))
    if len(batch_id) > BATCH_ID_MAX_CHARS:
        raise CorrectionRefused(Refusal("batch_id", f"longer than {BATCH_ID_MAX_CHARS} characters"))
    if not isinstance(level, str) or level.strip().lower() not in RISK_LEVELS:
        raise CorrectionRefused(Refusal("level", f"{_shown(level)} is not one of {', '.join(RISK_LEVELS)}"))
    if note is not None and not isinstance(note, str):
        raise CorrectionRefused(Refusal("note", "not a string"))
    if note is not None and len(note) > NOTE_MAX_CHARS:
        raise CorrectionRefused(Refusal("note", f"{len(note)} characters, at most {NOTE_MAX_CHARS}"))
    cleaned = "".join(c for c in note if c.isprintable() or c in "\n\t").strip() if note else ""
    return CorrectionRequest(batch_id.strip(), level.strip().lower(), cleaned or None, source)


def parse_command(payload: bytes) -> CorrectionRequest:
    """An MQTT command payload (`{"batch_id", "level", "note"}`) as a request; CorrectionRefused on an oversized,
    non-UTF-8 or malformed payload, or a bad field."""
    if len(payload) > PAYLOAD_MAX_BYTES:
        raise CorrectionRefused(Refusal("payload", f"{len(payload)} bytes, at most {PAYLOAD_MAX_BYTES}"))
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorrectionRefused(Refusal("payload", f"malformed JSON ({type(exc).__name__})")) from None
    if not isinstance(value, dict):
        raise CorrectionRefused(Refusal("payload", f"a JSON {type(value).__name__}, not an object"))
    return check_request(value.get("batch_id"), value.get("level"), value.get("note"), source="mqtt")


def command_camera(topic: str, prefix: str) -> str | None:
    """The camera slug of a command topic `<prefix>/<camera>/correction`, or None for any other topic."""
    head, _, rest = topic.partition(f"{prefix}/") if topic.startswith(f"{prefix}/") else ("", "", "")
    slug, _, tail = rest.partition("/")
    return slug if not head and slug and tail == "correction" else None


def check_against(
    request: CorrectionRequest, verdict: CorrectedVerdict | None, camera_slug: str | None = None
) -> Correction:
    """The request with the verdict storage found for its batch (None: no stored verdict); over MQTT the batch must
    belong to the topic's camera (`camera_slug`, compared by slug)."""
    if verdict is None:
        what = f"no stored verdict for camera {camera_slug!r}" if request.batch_id == LATEST else "no stored verdict"
        raise CorrectionRefused(Refusal("batch_id", f"unknown batch {request.batch_id!r}: {what}"))
    if (
        camera_slug is not None
        and verdict.camera_id != camera_slug
        and camera_key(verdict.camera_id).slug != camera_slug
    ):
        raise CorrectionRefused(
            Refusal("camera", f"batch {request.batch_id!r} belongs to {verdict.camera_id!r}, not {camera_slug!r}")
        )
    return Correction(request, verdict)


def unknown_camera(camera_slug: str, known_slugs: Iterable[str]) -> Refusal | None:
    """A refusal when no camera with a stored verdict has this slug."""
    if camera_slug in set(known_slugs):
        return None
    return Refusal("camera", f"unknown camera {camera_slug!r}: no stored verdict under that topic")


def rate_refusal(camera_slug: str, received_last_hour: int, per_hour: int) -> Refusal | None:
    """A refusal once a camera had `per_hour` MQTT corrections in the last hour: a flood stores a bounded number."""
    if received_last_hour < per_hour:
        return None
    return Refusal(
        "rate", f"camera {camera_slug!r} had {received_last_hour} corrections in the last hour (limit {per_hour})"
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
