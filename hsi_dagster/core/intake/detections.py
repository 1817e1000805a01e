"""Validation of one detection record (contract section 1): a `Detection`, or a `Rejection` naming the field.

This module is the authoritative definition of a valid record. The bulk loader (`hsi_dagster.storage.ingest`) runs a
faster SQL check first, but that check is only allowed to be *stricter*: every line it does not accept comes
back here for the final verdict and the reason, so both paths always agree on what gets loaded.

Decisions the contract leaves open (documented here, tested in tests/core/intake/test_detections_validation.py):
- Bounds (contract section 6) are parameters (`Bounds`, from the INGEST_* settings; defaults below). Over a bound,
  a required or identifying field (the line, `label`, `track_id`, `zone`) quarantines the record with a reason
  naming the setting; `detection_id` (1-128) and `camera_id` (1-64) are the contract's own rules. Optional
  enrichment over a bound is CUT and the detection kept, each cut listed in `Detection.cuts` (stored on the row):
  a text inside `enrichment` to INGEST_MAX_TEXT_CHARS characters, `florence.regions` and `clip` to their first
  INGEST_MAX_FLORENCE_REGIONS / INGEST_MAX_CLIP_CLASSES items (items past the bound are dropped unread, like
  content that is not stored), then, while the compact JSON of `enrichment` is over INGEST_MAX_ENRICHMENT_BYTES,
  its largest key is dropped. An enrichment key nested deeper than INGEST_MAX_ENRICHMENT_DEPTH levels is dropped
  first (readers of the stored JSON recurse). Ids and labels contain no control characters.
- `ts` is accepted from 1970-01-01 (inclusive) to 2200-01-01 (exclusive) UTC: a camera clock reset to zero or a
  garbage year is quarantined rather than opening a batch decades away. Fractions past microseconds are truncated.
- Booleans are not numbers (`true` is not a confidence); NaN, Infinity and numbers that overflow are rejected.
- `null` for an optional field means absent. Unknown top-level fields are ignored (not stored), so producers
  can add fields (the contract allows extensions). Unknown `enrichment` keys, and unknown fields inside the known
  enrichment objects, are kept in the stored JSON without being interpreted: the vision stack grows models before
  the prompt builder learns them, and dropping their output would lose data. Known keys are type-checked.
- A key that appears twice where a known field is expected (a contract field, a known enrichment key or a
  field of a known enrichment object) is rejected: JSON parsers disagree on which copy wins, so a checked value
  could be swapped for an unchecked one. Inside unknown content duplicates are left alone, like the rest of it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

MAX_LINE_BYTES = 65536
RAW_MAX_CHARS = 4096
MAX_DETECTION_ID_CHARS = 128  # the contract's rule, not a setting
MAX_CAMERA_ID_CHARS = 64  # the contract's rule, not a setting
MAX_LABEL_CHARS = 64
MAX_TAG_CHARS = 128  # track_id, zone
MAX_TEXT_CHARS = 2048  # any text inside enrichment (captions, descriptions)
MAX_LIST_ITEMS = 64  # clip classes, florence regions
MAX_ENRICHMENT_BYTES = 32768
MAX_ENRICHMENT_DEPTH = 32  # nesting levels of enrichment; the contract's own objects need 5
TS_MIN = datetime(1970, 1, 1, tzinfo=UTC)
TS_MAX = datetime(2200, 1, 1, tzinfo=UTC)

# Patterns shared with the SQL fast path: RE2 and Python's re read them the same way (ASCII classes only).
CAMERA_ID_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
PRINTABLE_CHAR_CLASS = r"[^\x00-\x1F\x7F]"
TS_PATTERN = (
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"
    r"(?:\.([0-9]{1,9}))?([Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
LIGHTING_VALUES = ("day", "dusk", "night")

_CAMERA_ID_RE = re.compile(CAMERA_ID_PATTERN)
_TS_RE = re.compile(TS_PATTERN)
_ID_RE = re.compile(f"{PRINTABLE_CHAR_CLASS}{{1,{MAX_DETECTION_ID_CHARS}}}")


@lru_cache(maxsize=32)
def _printable_re(max_chars: int) -> re.Pattern[str]:
    return re.compile(f"{PRINTABLE_CHAR_CLASS}{{1,{max_chars}}}")


@dataclass(frozen=True)
class Bounds:
    """Every bound that makes ingestion refuse or cut input (contract section 6). Each field is the setting named in
    `BOUND_SETTINGS`; `Bounds()` holds the defaults."""

    line_bytes: int = MAX_LINE_BYTES  # refuse: the whole line
    label_chars: int = MAX_LABEL_CHARS  # refuse: label
    tag_chars: int = MAX_TAG_CHARS  # refuse: track_id, zone (identifiers: a cut one could merge tracks)
    text_chars: int = MAX_TEXT_CHARS  # cut: every text inside enrichment
    florence_regions: int = MAX_LIST_ITEMS  # cut: enrichment.florence.regions
    clip_classes: int = MAX_LIST_ITEMS  # cut: enrichment.clip
    enrichment_bytes: int = MAX_ENRICHMENT_BYTES  # cut: largest enrichment keys dropped
    enrichment_depth: int = MAX_ENRICHMENT_DEPTH  # cut: keys nested deeper dropped (readers recurse on them)
    raw_chars: int = RAW_MAX_CHARS  # cut: the raw line kept in the quarantine

    @classmethod
    def from_settings(cls, settings: Any) -> Bounds:
        """The INGEST_* bounds of HsiSettings (read by name, BOUND_SETTINGS: core never imports settings)."""
        return cls(**{name: getattr(settings, setting) for name, setting in BOUND_SETTINGS.items()})

    def __post_init__(self) -> None:
        for name in BOUND_SETTINGS:
            if getattr(self, name) < 1:
                raise ValueError(f"{BOUND_SETTINGS[name]} must be >= 1, got {getattr(self, name)}")


# Bounds field -> the setting (HsiSettings, hsi.env) that sets it; reasons and cuts name the setting.
BOUND_SETTINGS: dict[str, str] = {
    "line_bytes": "INGEST_MAX_LINE_BYTES",
    "label_chars": "INGEST_MAX_LABEL_CHARS",
    "tag_chars": "INGEST_MAX_TAG_CHARS",
    "text_chars": "INGEST_MAX_TEXT_CHARS",
    "florence_regions": "INGEST_MAX_FLORENCE_REGIONS",
    "clip_classes": "INGEST_MAX_CLIP_CLASSES",
    "enrichment_bytes": "INGEST_MAX_ENRICHMENT_BYTES",
    "enrichment_depth": "INGEST_MAX_ENRICHMENT_DEPTH",
    "raw_chars": "QUARANTINE_RAW_MAX_CHARS",
}
DEFAULT_BOUNDS = Bounds()

TOP_LEVEL_FIELDS = ("detection_id", "camera_id", "ts", "label", "confidence", "bbox", "track_id", "zone", "enrichment")
REQUIRED_FIELDS = ("detection_id", "camera_id", "ts", "label", "confidence")


# --------------------------------------------------------------------------------------------------------------
# Enrichment spec: one declarative description, walked here and compiled to SQL by the bulk loader.
# Leaf kinds: every leaf is optional and may be null.
TEXT, UNIT, NONNEG, BOOL, LIGHTING, BBOX = "text", "unit", "nonneg", "bool", "lighting", "bbox"


@dataclass(frozen=True)
class Leaf:
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Obj:
    fields: dict[str, Spec]


@dataclass(frozen=True)
class ListOf:
    item: Spec
    bound: str  # the Bounds field that caps its length


Spec = Leaf | Obj | ListOf


def _leaves(**fields: str | tuple[str, ...]) -> Obj:
    return Obj({name: Leaf(kind if isinstance(kind, tuple) else (kind,)) for name, kind in fields.items()})


ENRICHMENT_SPEC: dict[str, Spec] = {
    "florence": Obj(
        {
            "caption": Leaf((TEXT,)),
            "dense_caption": Leaf((TEXT,)),
            "regions": ListOf(_leaves(label=TEXT, caption=TEXT, bbox=BBOX), "florence_regions"),
        }
    ),
    "clip": ListOf(_leaves(label=TEXT, score=UNIT), "clip_classes"),
    "scene": _leaves(description=TEXT, lighting=LIGHTING, indoor=BOOL),
    "pose": _leaves(posture=TEXT, score=UNIT),
    "action": _leaves(label=TEXT, score=UNIT),
    "pet": _leaves(species=TEXT, score=UNIT),
    "weather": _leaves(condition=TEXT, visibility=(TEXT, NONNEG)),
    "vehicle": _leaves(type=TEXT, color=TEXT, plate=TEXT, damage=(BOOL, TEXT)),
    "clothing": _leaves(description=TEXT, suspicious=BOOL),
    "violence": _leaves(score=UNIT),
    "depth": _leaves(distance_m=NONNEG),
    "reid": _leaves(identity=TEXT, known=BOOL, score=UNIT, seen_before=(BOOL, NONNEG)),
}


# --------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Detection:
    """A validated record; `ts` is an aware UTC datetime."""

    detection_id: str
    camera_id: str
    ts: datetime
    label: str
    confidence: float
    bbox: tuple[float, float, float, float] | None = None
    track_id: str | None = None
    zone: str | None = None
    enrichment: dict[str, Any] | None = None
    cuts: tuple[str, ...] = ()  # optional enrichment cut to a bound, one entry per cut (contract section 6)

    def cuts_json(self) -> str | None:
        """The cuts as stored on the row (`detections.enrichment_cuts`): a JSON list, or None when nothing was cut."""
        return json.dumps(list(self.cuts), ensure_ascii=False) if self.cuts else None

    def enrichment_json(self) -> str | None:
        """The enrichment as stored: compact JSON, unknown keys kept."""
        return None if self.enrichment is None else _compact_json(self.enrichment)

    def to_record(self) -> dict[str, Any]:
        """Back to a contract record (JSON-ready), e.g. to re-emit a cleaned stream."""
        record: dict[str, Any] = {
            "detection_id": self.detection_id,
            "camera_id": self.camera_id,
            "ts": format_ts(self.ts),
            "label": self.label,
            "confidence": self.confidence,
        }
        for name in ("bbox", "track_id", "zone", "enrichment"):
            value = getattr(self, name)
            if value is not None:
                record[name] = list(value) if name == "bbox" else value
        return record


@dataclass(frozen=True)
class Rejection:
    """A line that is not a valid record: where it came from, its raw text (bounded) and why."""

    source: str
    line_no: int
    raw: str
    reason: str

    @property
    def field(self) -> str:
        """The field the reason names (`line` for the whole line)."""
        return self.reason.split(":", 1)[0]


class _Invalid(Exception):
    """Internal: carries the reason of the first rule a record breaks."""


class _NonFinite:
    """Stands in for NaN/Infinity so the reason can name the field that holds it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def format_ts(ts: datetime) -> str:
    """Canonical RFC 3339 UTC text with microseconds, e.g. 2026-12-01T02:14:05.120000Z."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_raw(raw: str | bytes, limit: int = RAW_MAX_CHARS) -> str:
    """The raw line as text for the quarantine: undecodable bytes replaced, cut to `limit` chars with a marker."""
    if isinstance(raw, bytes):
        text = raw[: limit * 4].decode("utf-8", errors="replace")
        total = len(raw)
    else:
        text = raw
        total = len(raw.encode("utf-8", errors="replace"))
    # Lone surrogates cannot be stored as UTF-8.
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    if len(text) > limit:
        return text[:limit] + f"...[truncated, {total} bytes in all]"
    return text


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Object(dict):
    """A decoded JSON object that remembers the keys it had more than once (the last copy is kept)."""

    __slots__ = ("duplicates",)
    duplicates: frozenset[str]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = _Object(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        repeated: set[str] = set()
        for key, _ in pairs:
            (repeated if key in seen else seen).add(key)
        result.duplicates = frozenset(repeated)
    return result


def _check_duplicates(value: dict[str, Any], known: Any, field: str) -> None:
    duplicates = getattr(value, "duplicates", None)
    if duplicates:
        clash = sorted(k for k in duplicates if k in known)
        if clash:
            raise _Invalid(f"{field + '.' if field else ''}{clash[0]}: appears more than once in the object")


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_NonFinite)


def _show(value: Any, limit: int = 60) -> str:
    if isinstance(value, _NonFinite):
        return value.text
    if isinstance(value, str):
        text = json.dumps(value[: limit + 1], ensure_ascii=False)
    elif isinstance(value, (dict, list)):
        kind = "an object" if isinstance(value, dict) else "an array"
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
        return f"{kind} {text}" if len(text) <= limit else f"{kind} {text[:limit]}..."
    elif value is None:
        return "null"
    elif isinstance(value, bool):
        return "true" if value else "false"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, field: str, rule: str) -> float:
    """A finite float from a JSON number, or _Invalid naming the field and what it got."""
    if not _is_number(value):
        raise _Invalid(f"{field}: must be {rule}, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise _Invalid(f"{field}: must be {rule}, got {_show(value)}") from None
    if not math.isfinite(number):
        raise _Invalid(f"{field}: must be {rule}, got {_show(value)}")
    return number


def _check_utf8(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid(f"{field}: contains an unpaired unicode surrogate escape") from None


def _string(value: Any, field: str, pattern: re.Pattern[str], rule: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"{field}: must be a string, got {_show(value)}")
    _check_utf8(value, field)
    if pattern.fullmatch(value) is None:
        raise _Invalid(f"{field}: must {rule}, got {_show(value)}")
    return value


def _bbox(value: Any, field: str) -> tuple[float, float, float, float]:
    if not isinstance(value, list) or len(value) != 4:
        raise _Invalid(f"{field}: must be an array [x1, y1, x2, y2], got {_show(value)}")
    names = ("x1", "y1", "x2", "y2")
    numbers = tuple(
        _number(v, f"{field}", f"numbers between 0 and 1 ({name})") for v, name in zip(value, names, strict=False)
    )
    for number, name in zip(numbers, names, strict=False):
        if not 0.0 <= number <= 1.0:
            raise _Invalid(f"{field}: {name} must be between 0 and 1 (normalised), got {_show(number)}")
    x1, y1, x2, y2 = numbers
    if not x1 < x2:
        raise _Invalid(f"{field}: x1 must be < x2, got x1={_show(x1)} x2={_show(x2)}")
    if not y1 < y2:
        raise _Invalid(f"{field}: y1 must be < y2, got y1={_show(y1)} y2={_show(y2)}")
    return numbers  # type: ignore[return-value]


def parse_ts(value: Any, field: str = "ts") -> datetime:
    """RFC 3339 with an offset -> aware UTC datetime (fraction truncated to microseconds), or _Invalid."""
    if not isinstance(value, str):
        raise _Invalid(f"{field}: must be an RFC 3339 string with an offset, got {_show(value)}")
    match = _TS_RE.fullmatch(value)
    if match is None:
        raise _Invalid(f"{field}: not RFC 3339 with an offset (e.g. 2026-12-01T02:14:05.120Z), got {_show(value)}")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros)
    except ValueError as exc:
        raise _Invalid(f"{field}: not a valid date and time ({exc}), got {_show(value)}") from None
    if offset in ("Z", "z"):
        delta = timedelta(0)
    else:
        sign = 1 if offset[0] == "+" else -1
        delta = sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
    if not (TS_MIN.year - 1 <= local.year <= TS_MAX.year):
        raise _Invalid(
            f"{field}: out of range (must be from {TS_MIN:%Y-%m-%d} to before {TS_MAX:%Y-%m-%d} UTC), "
            f"got {_show(value)}"
        )
    utc = (local - delta).replace(tzinfo=UTC)
    if not TS_MIN <= utc < TS_MAX:
        raise _Invalid(
            f"{field}: out of range (must be from {TS_MIN:%Y-%m-%d} to before {TS_MAX:%Y-%m-%d} UTC), "
            f"got {_show(value)}"
        )
    return utc


class _Cutter:
    """The bounds of one record and the cuts made to fit its optional enrichment into them."""

    __slots__ = ("bounds", "cuts")

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.cuts: list[str] = []

    def cut(self, field: str, what: str, bound: str) -> None:
        self.cuts.append(f"{field}: {what} ({BOUND_SETTINGS[bound]}={getattr(self.bounds, bound)})")


def _check_leaf(value: Any, kinds: tuple[str, ...], field: str, cutter: _Cutter) -> Any:
    """The value to store (a text over the bound cut to it), or _Invalid."""
    if value is None:
        return value
    if isinstance(value, str) and TEXT in kinds:
        _check_utf8(value, field)
        limit = cutter.bounds.text_chars
        if len(value) > limit:
            cutter.cut(field, f"{len(value)} characters cut to {limit}", "text_chars")
            return value[:limit]
        return value
    if isinstance(value, str) and LIGHTING in kinds:
        if value not in LIGHTING_VALUES:
            raise _Invalid(f"{field}: must be one of {', '.join(LIGHTING_VALUES)}, got {_show(value)}")
        return value
    if isinstance(value, bool) and BOOL in kinds:
        return value
    if _is_number(value) and UNIT in kinds:
        number = _number(value, field, "a number between 0 and 1")
        if not 0.0 <= number <= 1.0:
            raise _Invalid(f"{field}: must be a number between 0 and 1, got {_show(value)}")
        return value
    if _is_number(value) and NONNEG in kinds:
        number = _number(value, field, "a finite number >= 0")
        if number < 0:
            raise _Invalid(f"{field}: must be a finite number >= 0, got {_show(value)}")
        return value
    if BBOX in kinds and isinstance(value, list):
        _bbox(value, field)
        return value
    expected = {
        TEXT: "a string",
        UNIT: "a number between 0 and 1",
        NONNEG: "a finite number >= 0",
        BOOL: "true or false",
        LIGHTING: f"one of {', '.join(LIGHTING_VALUES)}",
        BBOX: "an array [x1, y1, x2, y2]",
    }
    raise _Invalid(f"{field}: must be {' or '.join(expected[k] for k in kinds)}, got {_show(value)}")


def _check_spec(value: Any, spec: Spec, field: str, cutter: _Cutter) -> Any:
    """The value to store (cut to the bounds in place where needed), or _Invalid naming the field."""
    if value is None:
        return value
    if isinstance(spec, Leaf):
        return _check_leaf(value, spec.kinds, field, cutter)
    if isinstance(spec, Obj):
        if not isinstance(value, dict):
            raise _Invalid(f"{field}: must be an object, got {_show(value)}")
        _check_duplicates(value, spec.fields, field)
        for name, sub in spec.fields.items():
            if name in value:
                value[name] = _check_spec(value[name], sub, f"{field}.{name}", cutter)
        return value
    if not isinstance(value, list):
        raise _Invalid(f"{field}: must be an array, got {_show(value)}")
    limit = getattr(cutter.bounds, spec.bound)
    if len(value) > limit:
        cutter.cut(field, f"{len(value)} items cut to the first {limit}", spec.bound)
        del value[limit:]
    for index, item in enumerate(value):
        if not isinstance(item, dict) and isinstance(spec.item, Obj):
            raise _Invalid(f"{field}[{index}]: must be an object, got {_show(item)}")
        value[index] = _check_spec(item, spec.item, f"{field}[{index}]", cutter)
    return value


def _storable(value: Any) -> Any:
    """Unknown content is kept uninterpreted; NaN/Infinity placeholders become the floats json.dumps writes back."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if isinstance(sub, _NonFinite):
                    item[key] = float(sub.text)
                elif isinstance(sub, (dict, list)):
                    stack.append(sub)
        elif isinstance(item, list):
            for index, sub in enumerate(item):
                if isinstance(sub, _NonFinite):
                    item[index] = float(sub.text)
                elif isinstance(sub, (dict, list)):
                    stack.append(sub)
    return value


def json_depth(value: Any) -> int:
    """Nesting levels of objects and arrays (a scalar is 0, `{}` is 1), counted without recursion: a hostile line
    must not exhaust the stack here, nor later in a reader that recurses (json.dumps, DuckDB, the prompt builder)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _json_size(value: Any, field: str) -> int:
    try:
        return len(_compact_json(value).encode("utf-8"))
    except UnicodeEncodeError:
        raise _Invalid(f"{field}: contains an unpaired unicode surrogate escape") from None


def _enrichment(value: Any, cutter: _Cutter) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid(f"enrichment: must be an object, got {_show(value)}")
    _check_duplicates(value, ENRICHMENT_SPEC, "enrichment")
    limit_depth = cutter.bounds.enrichment_depth
    for key in list(value):
        depth = 1 + json_depth(value[key])
        if depth > limit_depth:
            del value[key]
            cutter.cut(f"enrichment.{key}", f"dropped, nested {depth} levels deep", "enrichment_depth")
    for key, spec in ENRICHMENT_SPEC.items():
        if key in value:
            value[key] = _check_spec(value[key], spec, f"enrichment.{key}", cutter)
    _storable(value)
    size = _json_size(value, "enrichment")
    limit = cutter.bounds.enrichment_bytes
    if size > limit:
        sizes = {key: _json_size(item, f"enrichment.{key}") for key, item in value.items()}
        for key in sorted(sizes, key=lambda k: (-sizes[k], k)):  # largest first: the fewest keys lost
            del value[key]
            cutter.cut(f"enrichment.{key}", f"dropped, the enrichment was {size} bytes", "enrichment_bytes")
            if _json_size(value, "enrichment") <= limit:
                break
    return value


def _optional_tag(record: dict[str, Any], name: str, bounds: Bounds) -> str | None:
    value = record.get(name)
    if value is None:
        return None
    limit = bounds.tag_chars
    rule = f"be 1-{limit} characters without control characters ({BOUND_SETTINGS['tag_chars']})"
    return _string(value, name, _printable_re(limit), rule)


def _build(record: dict[str, Any], bounds: Bounds) -> Detection:
    _check_duplicates(record, TOP_LEVEL_FIELDS, "")
    for name in REQUIRED_FIELDS:
        if record.get(name) is None:
            raise _Invalid(f"{name}: required field is missing" + (" (null)" if name in record else ""))
    detection_id = _string(
        record["detection_id"],
        "detection_id",
        _ID_RE,
        f"be 1-{MAX_DETECTION_ID_CHARS} characters without control characters",
    )
    camera_id = _string(record["camera_id"], "camera_id", _CAMERA_ID_RE, f"match {CAMERA_ID_PATTERN}")
    ts = parse_ts(record["ts"])
    label = _string(
        record["label"],
        "label",
        _printable_re(bounds.label_chars),
        f"be 1-{bounds.label_chars} characters without control characters ({BOUND_SETTINGS['label_chars']})",
    )
    confidence = _number(record["confidence"], "confidence", "a number between 0 and 1")
    if not 0.0 <= confidence <= 1.0:
        raise _Invalid(f"confidence: must be a number between 0 and 1, got {_show(record['confidence'])}")
    bbox = None if record.get("bbox") is None else _bbox(record["bbox"], "bbox")
    track_id = _optional_tag(record, "track_id", bounds)
    zone = _optional_tag(record, "zone", bounds)
    cutter = _Cutter(bounds)
    enrichment = _enrichment(record.get("enrichment"), cutter)
    return Detection(
        detection_id, camera_id, ts, label, confidence, bbox, track_id, zone, enrichment, tuple(cutter.cuts)
    )


def validate_record(
    line: str | bytes, *, source: str, line_no: int, bounds: Bounds = DEFAULT_BOUNDS
) -> Detection | Rejection:
    """One JSON Lines record -> Detection (optional enrichment cut to `bounds`, listed in `cuts`), or Rejection
    whose reason starts with the field it names (and names the setting of a bound it breaks).

    Never raises: any input, however broken, becomes one or the other.
    """
    try:
        return _validate(line, bounds)
    except _Invalid as exc:
        return Rejection(source, line_no, truncate_raw(line, bounds.raw_chars), str(exc))
    except Exception as exc:  # pragma: no cover - a bug here must not stop ingestion
        return Rejection(
            source,
            line_no,
            truncate_raw(line, bounds.raw_chars),
            f"line: could not be validated ({type(exc).__name__}: {exc})",
        )


def line_too_long_reason(size: int, bounds: Bounds = DEFAULT_BOUNDS) -> str:
    """The quarantine reason of a line over the byte bound (also used by the reader, which skips such lines)."""
    return f"line: longer than {bounds.line_bytes} bytes ({size}; {BOUND_SETTINGS['line_bytes']})"


def _validate(line: str | bytes, bounds: Bounds) -> Detection:
    if isinstance(line, (bytes, bytearray, memoryview)):
        raw = bytes(line)
        if len(raw) > bounds.line_bytes:
            raise _Invalid(line_too_long_reason(len(raw), bounds))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Invalid(f"line: not valid UTF-8 (byte {exc.start}: {exc.reason})") from None
    elif isinstance(line, str):
        text = line
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise _Invalid("line: not valid UTF-8 (unpaired surrogate)") from None
        if size > bounds.line_bytes:
            raise _Invalid(line_too_long_reason(size, bounds))
    else:
        raise _Invalid(f"line: must be str or bytes, got {type(line).__name__}")
    if not text.strip():
        raise _Invalid("line: empty")
    try:
        record = _DECODER.decode(text)
    except RecursionError:
        raise _Invalid("line: not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, duplicate keys, oversized integers
        raise _Invalid(f"line: not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise _Invalid(f"line: must be a JSON object, got {_show(record)}")
    return _build(record, bounds)


def loads_enrichment(text: str | bytes | dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored `detections.enrichment` back to a dict (unknown content may hold NaN/Infinity: json.loads reads
    them)."""
    if text is None or isinstance(text, dict):
        return text
    return json.loads(text)
