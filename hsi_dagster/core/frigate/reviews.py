"""Frigate's review items (MQTT `<prefix>/reviews`, the API's `/api/review` items) as facts of a time span. Pure.

Shape (frigate/review/maintainer.py, web/src/types/review.ts): `{"type": "new"|"update"|"end"|"genai", "before",
"after"}`, `after` = `{id, camera, start_time, end_time, severity: alert|detection|significant_motion, thumb_path,
data: {detections: [object ids], objects: [labels], sub_labels, zones, audio, metadata}}`. `metadata` is the GenAI
review summary (0.16+; the `genai` message): `title`, `scene`, `shortSummary`, `observations` (0.18), `confidence`,
`potential_threat_level` 0 normal / 1 suspicious / 2 critical, `other_concerns`. An API item is `after` alone.

A review is evidence of the batch that covers its time span: another model's opinion (its threat level counts within
the trust of that model, never as a floor: core/verdict/evidence.py does not read it) and a text that may carry
injected instructions (the prompt quotes it as camera data). Required: `id`, `camera`, `start_time` (else Invalid, the
payload quarantined); anything else of an unexpected shape is ignored with a reason in `ignored`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hsi_dagster.core.frigate.fields import (
    PayloadError,
    cut_text,
    read_epoch,
    read_object,
    read_text,
    show_value,
)

REVIEW_TYPES = ("new", "update", "end", "genai")
SEVERITIES = ("alert", "detection", "significant_motion")
THREAT_LEVELS = {0: "normal", 1: "suspicious", 2: "critical"}
MAX_REVIEW_ID_CHARS = 64
MAX_ITEMS = 32  # ids, labels, zones, observations per review
MAX_SUMMARY_CHARS = 600


@dataclass(frozen=True)
class Review:
    review_id: str
    camera_id: str
    kind: str  # new | update | end | genai | api
    start: float  # epoch seconds
    end: float | None
    severity: str | None
    objects: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    detections: tuple[str, ...] = ()  # Frigate's object ids (this project's track ids)
    summary: dict[str, Any] = field(default_factory=dict)  # the GenAI summary's fields, bounded; {} without one
    ignored: tuple[str, ...] = ()

    @property
    def threat_level(self) -> int | None:
        value = self.summary.get("potential_threat_level")
        return value if isinstance(value, int) else None


def _names(value: Any, name: str, ignored: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        ignored.append(f"{name}: must be a list, got {show_value(value)}")
        return ()
    found = []
    for index, item in enumerate(value):
        text = item[0] if isinstance(item, list) and item and isinstance(item[0], str) else item  # [name, score]
        if isinstance(text, str) and text.strip() and len(text) <= MAX_REVIEW_ID_CHARS:
            found.append(text)
        else:
            ignored.append(f"{name}[{index}]: not a name, got {show_value(item)}")
    if len(found) > MAX_ITEMS:
        ignored.append(f"{name}: {len(found)} items, the first {MAX_ITEMS} kept")
    return tuple(dict.fromkeys(found[:MAX_ITEMS]))


def _text(value: Any, name: str, ignored: list[str], limit: int = MAX_SUMMARY_CHARS) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        ignored.append(f"{name}: must be text, got {show_value(value)}")
        return None
    text, _ = cut_text(" ".join(value.split()), limit)
    return text or None


def _summary(metadata: Any, name: str, ignored: list[str]) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        ignored.append(f"{name}: must be an object, got {show_value(metadata)}")
        return {}
    summary: dict[str, Any] = {}
    for key, limit in (("title", 120), ("scene", MAX_SUMMARY_CHARS), ("shortSummary", MAX_SUMMARY_CHARS)):
        text = _text(metadata.get(key), f"{name}.{key}", ignored, limit)
        if text:
            summary[key] = text
    for key in ("observations", "other_concerns"):
        items = metadata.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            ignored.append(f"{name}.{key}: must be a list, got {show_value(items)}")
            continue
        texts = [t for i, item in enumerate(items[:MAX_ITEMS]) if (t := _text(item, f"{name}.{key}[{i}]", ignored))]
        if texts:
            summary[key] = texts
    level = metadata.get("potential_threat_level")
    if level is not None:
        if isinstance(level, int) and not isinstance(level, bool) and level in THREAT_LEVELS:
            summary["potential_threat_level"] = level
        else:
            ignored.append(f"{name}.potential_threat_level: must be 0, 1 or 2, got {show_value(level)}")
    confidence = metadata.get("confidence")
    if confidence is not None:
        number = float(confidence) if isinstance(confidence, (int, float)) and not isinstance(confidence, bool) else -1
        if math.isfinite(number) and 0 <= number <= 1:
            summary["confidence"] = number
        else:
            ignored.append(f"{name}.confidence: must be a number between 0 and 1, got {show_value(confidence)}")
    return summary


def _review(after: dict[str, Any], kind: str, prefix: str) -> Review:
    ignored: list[str] = []
    review_id = read_text(after.get("id"), f"{prefix}id", MAX_REVIEW_ID_CHARS)
    camera = read_text(after.get("camera"), f"{prefix}camera")
    start = read_epoch(after.get("start_time"), f"{prefix}start_time")
    end = None
    if after.get("end_time") is not None:
        try:
            end = read_epoch(after.get("end_time"), f"{prefix}end_time")
        except PayloadError as exc:
            ignored.append(str(exc))
    severity = after.get("severity")
    if severity is not None and severity not in SEVERITIES:
        ignored.append(f"{prefix}severity: must be one of {', '.join(SEVERITIES)}, got {show_value(severity)}")
        severity = None
    data = after.get("data")
    if data is not None and not isinstance(data, dict):
        ignored.append(f"{prefix}data: must be an object, got {show_value(data)}")
        data = None
    data = data or {}
    return Review(
        review_id,
        camera,
        kind,
        start,
        end,
        severity,
        objects=_names(data.get("objects"), f"{prefix}data.objects", ignored),
        zones=_names(data.get("zones"), f"{prefix}data.zones", ignored),
        detections=_names(data.get("detections"), f"{prefix}data.detections", ignored),
        summary=_summary(data.get("metadata"), f"{prefix}data.metadata", ignored),
        ignored=tuple(ignored),
    )


def map_review(payload: Any) -> Review | str:
    """One `<prefix>/reviews` payload -> a Review, or the reason it cannot be read (naming the field)."""
    try:
        message = read_object(payload, "payload")
        kind = message.get("type")
        if kind not in REVIEW_TYPES:
            raise PayloadError(f"type: must be one of {', '.join(REVIEW_TYPES)}, got {show_value(kind)}")
        return _review(read_object(message.get("after"), "after"), str(kind), "after.")
    except PayloadError as exc:
        return str(exc)


def map_review_item(item: Any) -> Review | str:
    """One `/api/review` item -> a Review, or the reason it cannot be read."""
    try:
        return _review(read_object(item, "item"), "api", "")
    except PayloadError as exc:
        return str(exc)
