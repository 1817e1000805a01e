"""Readers of Frigate payload fields: each returns the value in the contract's terms or raises PayloadError
naming the Frigate field and what is wrong with it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hsi_dagster.core.intake.detections import MAX_TAG_CHARS, MAX_TEXT_CHARS, TS_MAX, TS_MIN, format_ts

_PRINTABLE = re.compile(r"[^\x00-\x1F\x7F]+")

Resolution = tuple[int, int]


class PayloadError(Exception):
    """The first problem found in a payload, as 'field: what is wrong'."""


def show_value(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[:limit] + "..."


def read_object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PayloadError(f"{name}: must be an object, got {show_value(value)}")
    return value


def read_text(value: Any, name: str, limit: int = MAX_TAG_CHARS) -> str:
    if not isinstance(value, str) or not value:
        raise PayloadError(f"{name}: must be a non-empty string, got {show_value(value)}")
    if len(value) > limit or not _PRINTABLE.fullmatch(value):
        raise PayloadError(f"{name}: must be 1-{limit} characters without control characters, got {show_value(value)}")
    return value


def read_number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise PayloadError(f"{name}: must be a finite number, got {show_value(value)}")
    return float(value)


def read_unit(value: Any, name: str) -> float:
    number = read_number(value, name)
    if not 0.0 <= number <= 1.0:
        raise PayloadError(f"{name}: must be a number between 0 and 1, got {show_value(value)}")
    return number


def read_epoch(value: Any, name: str) -> float:
    seconds = read_number(value, name)
    if not TS_MIN.timestamp() <= seconds < TS_MAX.timestamp():
        raise PayloadError(
            f"{name}: must be epoch seconds from {TS_MIN:%Y-%m-%d} to before {TS_MAX:%Y-%m-%d}, got {value!r}"
        )
    return seconds


def epoch_to_ts(seconds: float) -> str:
    """Frigate's epoch seconds -> the contract's RFC 3339 UTC text (microseconds)."""
    return format_ts(datetime.fromtimestamp(seconds, UTC))


def read_zones(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(z, str) and z for z in value):
        raise PayloadError(f"{name}: must be a list of zone names, got {show_value(value)}")
    return list(value)


def zone_text(zones: Sequence[str]) -> str | None:
    """The contract's one `zone`: the current zones in Frigate's order, comma-joined, whole zones within the bound."""
    kept: list[str] = []
    for zone in zones:
        if len(",".join([*kept, zone])) > MAX_TAG_CHARS:
            break
        kept.append(zone)
    return ",".join(kept) or None


def read_named_score(value: Any, name: str) -> tuple[str, float | None] | None:
    """`[name, score]` (MQTT), `"name"` (API, some docs) or null -> (name, score) or None."""
    if value is None:
        return None
    if isinstance(value, str):
        return (read_text(value, name), None) if value else None
    if isinstance(value, list) and len(value) == 2:
        label, score = value
        if label is None:
            return None  # Frigate clears a sub_label by setting (None, None)
        return read_text(label, f"{name}[0]"), None if score is None else read_unit(score, f"{name}[1]")
    raise PayloadError(f"{name}: must be null, a string or [name, score], got {show_value(value)}")


def read_optional_unit(value: Any, name: str) -> float | None:
    return None if value is None else read_unit(value, name)


def read_bool(value: Any, name: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PayloadError(f"{name}: must be true or false, got {show_value(value)}")
    return value


def read_pixel_box(value: Any, name: str, resolution: Resolution, camera: str) -> list[float]:
    if not isinstance(value, list) or len(value) != 4:
        raise PayloadError(f"{name}: must be [x1, y1, x2, y2] in pixels, got {show_value(value)}")
    x1, y1, x2, y2 = (read_number(v, name) for v in value)
    width, height = resolution
    if not (0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height):
        raise PayloadError(
            f"{name}: {show_value(value)} is not a box inside camera {camera}'s detect resolution {width}x{height} "
            f"(cameras.{camera}.detect.width/height in the Frigate config)"
        )
    return [round(x1 / width, 6), round(y1 / height, 6), round(x2 / width, 6), round(y2 / height, 6)]


def read_relative_box(value: Any, name: str) -> list[float] | None:
    """`data.box` [x, y, w, h] relative -> [x1, y1, x2, y2]; rounding past 1 by a hair is clamped."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 4:
        raise PayloadError(f"{name}: must be [x, y, w, h] relative to the frame, got {show_value(value)}")
    x, y, w, h = (read_number(v, name) for v in value)
    x2, y2 = x + w, y + h
    if not (min(x, y) >= 0 and w > 0 and h > 0 and x2 <= 1 + 1e-6 and y2 <= 1 + 1e-6):
        raise PayloadError(f"{name}: {show_value(value)} is not a box [x, y, w, h] inside the frame (0..1)")
    return [round(x, 6), round(y, 6), round(min(x2, 1.0), 6), round(min(y2, 1.0), 6)]


def cut_text(text: str, limit: int = MAX_TEXT_CHARS) -> tuple[str, int | None]:
    """The text within the contract's bound, and its original length when it was cut (None if not)."""
    return (text, None) if len(text) <= limit else (text[:limit], len(text))
