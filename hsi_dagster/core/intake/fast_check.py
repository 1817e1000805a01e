"""The fast path of ingestion: each line checked against a typed schema by msgspec (in C), compiled from the contract.

`validate_record` stays the authoritative validator. This check is only allowed to be *stricter*: a line it
accepts is one `validate_record` accepts with the same values; every other line goes to `validate_record` for
the verdict and the reason. To stay stricter where msgspec is more lenient than the contract, it also requires:
- no duplicate and no unknown key: msgspec keeps the last copy of a key and skips unknown ones unread, so the
  line's ':' count must equal the count in msgspec's re-encoding of what it decoded (':' only occurs after a key
  or inside a string, and re-encoding a string keeps its ':'s as they are, unless one was escaped as \\u003a:
  such lines are left to the validator);
- enrichment at most half of its byte bound (a fifth with unknown keys), so its compact form as Python prints
  it stays in bound;
- every list and text within its bound (`Bounds`): the validator cuts what is over and records the cut, so the
  checker is compiled per `Bounds` (cached) and refuses anything it would have to cut.
msgspec itself refuses raw control characters, invalid UTF-8, lone surrogates, NaN and numbers that overflow.
The accepted lines are then parsed once more, in bulk, by DuckDB (`storage/ingest_checks.py`: a typed from_json,
exact once msgspec has checked every type), which also does what a regex or a date does better vectorized: the
camera_id pattern, no control characters in ids, labels and tags, the ts pattern and range, the bbox order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import UNSET, Meta, UnsetType

from hsi_dagster.core.intake.detections import (
    BBOX,
    BOOL,
    DEFAULT_BOUNDS,
    ENRICHMENT_SPEC,
    LIGHTING,
    LIGHTING_VALUES,
    MAX_CAMERA_ID_CHARS,
    MAX_DETECTION_ID_CHARS,
    NONNEG,
    TEXT,
    UNIT,
    Bounds,
    Leaf,
    ListOf,
    Obj,
    Spec,
    json_depth,
)

_Unit = Annotated[float, Meta(ge=0.0, le=1.0)]
_BBox = tuple[_Unit, _Unit, _Unit, _Unit]


def _leaf_types(bounds: Bounds) -> dict[str, Any]:
    return {
        TEXT: Annotated[str, Meta(max_length=bounds.text_chars)],
        UNIT: _Unit,
        NONNEG: Annotated[float, Meta(ge=0.0)],  # msgspec refuses NaN, Infinity and numbers that overflow
        BOOL: bool,
        LIGHTING: Literal[LIGHTING_VALUES],
        BBOX: _BBox,
    }


def _check_bbox_order(self: Any) -> None:
    if isinstance(self.bbox, tuple) and not (self.bbox[0] < self.bbox[2] and self.bbox[1] < self.bbox[3]):
        raise ValueError("bbox: x1 < x2 and y1 < y2")


def _msgspec_type(spec: Spec, name: str, bounds: Bounds) -> Any:
    """Every known field is optional and may be null; absent stays UNSET, so re-encoding writes only what was read."""
    if isinstance(spec, Leaf):
        leaf_types = _leaf_types(bounds)
        return Union[tuple(leaf_types[kind] for kind in spec.kinds)]  # noqa: UP007 (a runtime union of a tuple)
    if isinstance(spec, ListOf):
        item = _msgspec_type(spec.item, name + "_item", bounds)
        return Annotated[list[item], Meta(max_length=getattr(bounds, spec.bound))]  # type: ignore[valid-type]
    fields = [
        (key, _msgspec_type(sub, f"{name}_{key}", bounds) | None | UnsetType, UNSET) for key, sub in spec.fields.items()
    ]
    has_bbox = any(isinstance(sub, Leaf) and BBOX in sub.kinds for sub in spec.fields.values())
    namespace = {"__post_init__": _check_bbox_order} if has_bbox else None
    return msgspec.defstruct(name, fields, namespace=namespace, gc=False)


def _text(max_chars: int) -> Any:
    return Annotated[str, Meta(min_length=1, max_length=max_chars)]


def _record_type(bounds: Bounds) -> Any:
    """The contract's top level; the enrichment is kept as raw JSON (stored as is) and checked separately."""
    tag = _text(bounds.tag_chars) | None | UnsetType
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        ("detection_id", _text(MAX_DETECTION_ID_CHARS)),
        ("camera_id", _text(MAX_CAMERA_ID_CHARS)),
        ("ts", _text(64)),
        ("label", _text(bounds.label_chars)),
        ("confidence", _Unit),
        ("bbox", _BBox | None | UnsetType, UNSET),
        ("track_id", tag, UNSET),
        ("zone", tag, UNSET),
        ("enrichment", msgspec.Raw | UnsetType, UNSET),
    ]
    return msgspec.defstruct("Record", fields, gc=False)


class _Checker:
    """The decoders of one set of bounds (compiled once per `Bounds`, see `_checker`)."""

    def __init__(self, bounds: Bounds) -> None:
        self.line_bytes = bounds.line_bytes
        self.enrichment_depth = bounds.enrichment_depth
        self.record = msgspec.json.Decoder(_record_type(bounds))
        self.enrichment = msgspec.json.Decoder(_msgspec_type(Obj(dict(ENRICHMENT_SPEC)), "Enrichment", bounds))
        # validate_record bounds the enrichment's compact JSON as Python prints it. Known numbers grow at most 1.25x
        # (1E-5 -> 1e-05) but for three unbounded ones; unknown content can hold any number
        # (1e15 -> 1000000000000000.0, 4.5x).
        self.max_raw_enrichment = bounds.enrichment_bytes // 2
        self.max_raw_with_unknown = bounds.enrichment_bytes // 5


@lru_cache(maxsize=8)
def _checker(bounds: Bounds) -> _Checker:
    return _Checker(bounds)


_ENCODE = msgspec.json.Encoder().encode
_ENRICHMENT_PARTS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()


@dataclass
class FastChunk:
    """Where each line of a chunk goes: accepted, blank, or to the authoritative validator."""

    accepted_at: list[int] = field(default_factory=list)
    refused_at: list[int] = field(default_factory=list)
    blank_at: list[int] = field(default_factory=list)


def _accept(line: bytes, checker: _Checker) -> bool:
    if len(line) > checker.line_bytes or (b"\\" in line and (b"\\u003a" in line or b"\\u003A" in line)):
        return False
    try:
        record = checker.record.decode(line)
        if line.count(b":") != _ENCODE(record).count(b":"):
            return False
        raw = record.enrichment
        if raw is UNSET:
            return True
        text = bytes(raw)
        if text == b"null":
            return True
        if len(text) > checker.max_raw_enrichment:
            return False
        return _ENCODE(checker.enrichment.decode(text)).count(b":") == text.count(b":") or _with_unknown_keys(
            text, checker
        )
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):  # nested too deeply: the validator says so
        return False


def _with_unknown_keys(text: bytes, checker: _Checker) -> bool:
    """Second chance for an enrichment with keys the contract does not know (a new vision model): they are kept
    uninterpreted, as validate_record does, once the known ones check out and no key repeats."""
    if len(text) > checker.max_raw_with_unknown:
        return False
    colons = known_colons = 0
    for key, value in _ENRICHMENT_PARTS.decode(text).items():
        value_bytes = bytes(value)
        colons += 1 + value_bytes.count(b":")
        if key in ENRICHMENT_SPEC:
            known_colons += 1 + value_bytes.count(b":")
        else:
            # valid JSON and UTF-8 throughout, no NaN (msgspec skips unknown content unread), and not cut for depth
            if 1 + json_depth(_ANY.decode(value_bytes)) > checker.enrichment_depth:
                return False
    return colons == text.count(b":") and _ENCODE(checker.enrichment.decode(text)).count(b":") == known_colons


def fast_check(lines: list[bytes], bounds: Bounds = DEFAULT_BOUNDS) -> FastChunk:
    """Split the lines into accepted ones, blank ones and the ones for the authoritative validator."""
    chunk = FastChunk()
    accepted, refused, blank, accept = chunk.accepted_at.append, chunk.refused_at.append, chunk.blank_at.append, _accept
    checker = _checker(bounds)
    for index, line in enumerate(lines):
        if accept(line, checker):
            accepted(index)
        elif line.strip(b" \t\r\n"):
            refused(index)
        else:
            blank(index)
    return chunk
