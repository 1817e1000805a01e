"""Turn one batch of detections and their vision-model payloads into a structured, de-duplicated context.

Pure code (no Dagster, no I/O). The context is what the prompt renders; it is stored as JSON
(`enriched_contexts.context`), so `EnrichedContext.to_json()` / `from_json()` round-trip it.

Choices (documented here because the prompt and the tests rely on them):
- Quality levels decide which enrichment types are used at all (`QUALITY_LEVEL_TYPES`, derived from the one
  table of sections in `core/context/sections.py`). "standard" drops the four types the reference system values least
  (depth, pose, action, pet: the head of the removal order) and keeps what most changes a risk judgement:
  captions, CLIP classes, weather, vehicle, clothing, violence, re-id. Detections and scene analysis are always
  included; "minimal" adds Florence captions and re-identification (identity is never optional).
- Florence-2 "repeat": see `content_tokens` and `is_repeat`. A region caption is dropped when >= 80 % of its
  content tokens already occur in the same detection's global or dense caption (the global caption likewise when
  the dense caption covers it); any caption whose content-token set equals one already kept for the same track
  (or untracked detection) is a duplicate and dropped. One entry per detection that still says something new.
- CLIP classes scoring strictly below `clip_noise_threshold` are dropped (counted, not shown).
- Other types are grouped per track (weather: per batch); identical text fields collapse into one observation
  with a count and min/max (first/last) of the numeric fields, so 30 frames of "standing 0.9" are one line.
"""

from __future__ import annotations

import contextlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from statistics import fmean
from typing import Any, Literal
from zoneinfo import ZoneInfo

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import (
    BatchInfo,
    ClipClass,
    ClipEntry,
    ClipSummary,
    DetectionItem,
    DetectionsSummary,
    EnrichedContext,
    FlorenceEntry,
    FlorenceSummary,
    NumberRange,
    Observation,
    RegionCaption,
    ReviewFacts,
    SceneSummary,
    TrackSummary,
)
from hsi_dagster.core.context.history import HistoryFacts
from hsi_dagster.core.context.sections import (  # the one definition of the sections; re-exported here
    BATCH_SCOPED_TYPES,
    ENRICHMENT_TYPES,
    OBSERVATION_FIELDS,
    QUALITY_LEVEL_TYPES,
)

HIGH_VALUE_LABELS = frozenset({"person"})

MAX_TEXT_CHARS = 300  # one caption / field value; bounds the prompt whatever the camera sends
MAX_CLIP_CLASSES = 5  # per track, best first
TOP_READINGS = 5  # highest readings kept per numeric field of an observation (NumberRange.top)
REPEAT_THRESHOLD = 0.80

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_STOPWORDS_TEXT = (  # space-separated: easier to review than 113 list items
    "a an the and or but of to in on at by for from with without into onto over under near next beside behind off "
    "out up down around through toward towards across along against between is are was were be been being am has "
    "have had do does did it its it's this that these those there here he she they them his her their him we us "
    "our you your i me my as while who which what where when some any one two several other another very also "
    "just can could may might appears appear seems seem seen visible image picture photo frame shows show showing "
    "shown view scene camera"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def clean_text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """Whitespace-collapsed, NFKC-normalised, length-bounded text ('' for non-strings)."""
    if not isinstance(value, str):
        return ""
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", value)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _singular(token: str) -> str:
    """A matching key, not a word: drop a plural 's', then spell a final 'y' as 'ie' (puppy/puppies, hoodie/hoodies)."""
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        token = token[:-1]
    if len(token) > 2 and token.endswith("y"):
        token = token[:-1] + "ie"
    return token


def content_tokens(text: str) -> set[str]:
    """Lowercase, split on anything not a letter/digit, drop STOPWORDS and single letters, fold plurals (_singular)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text or "").lower())
    return {_singular(word) for word in words if word not in STOPWORDS and (len(word) > 1 or word.isdigit())}


def is_repeat(region_tokens: set[str], reference_tokens: set[str], threshold: float = REPEAT_THRESHOLD) -> bool:
    """True when >= threshold of the region's content tokens are in the reference; an empty region adds nothing."""
    if not region_tokens:
        return True
    return len(region_tokens & reference_tokens) / len(region_tokens) >= threshold


MAX_REVIEWS = 3  # review items per batch (the prompt's detections head shows them: bounded)
MAX_REVIEW_LINES = 3  # observations, other concerns per review


# ----------------------------------------------------------------------------------------------- helpers
def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if dt.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no UTC offset (the contract requires aware timestamps)")
    return dt.astimezone(UTC)


def _names(value: Any, limit: int = 64) -> list[str]:
    """A list of names (zones, plates) from untrusted JSON: strings only, cleaned, unique, at most 32."""
    if not isinstance(value, list):
        return []
    names = (clean_text(v, limit) for v in value if isinstance(v, str))
    return list(dict.fromkeys(n for n in names if n))[:32]


def _track_facts(members: list[_Det]) -> dict[str, Any]:
    """What the detector's payloads say of a whole track (enrichment.frigate, written by core/frigate/mapping.py)."""
    entered: list[str] = []
    started: list[datetime] = []
    attributes: dict[str, float] = {}
    plates: list[str] = []
    sub_labels: list[str] = []
    delivery = None
    for det in members:
        facts = det.frigate
        entered.extend(det.entered)
        if isinstance(facts.get("start_time"), str):
            with contextlib.suppress(TypeError, ValueError):
                started.append(_as_datetime(facts["start_time"]))
        raw = facts.get("attributes")
        for name, score in raw.items() if isinstance(raw, Mapping) else ():
            number = _number(score)
            key = clean_text(name, 64)
            if key and number is not None and 0 <= number <= 1:
                attributes[key] = max(number, attributes.get(key, 0.0))
        plate = facts.get("plate")
        if isinstance(plate, Mapping) and clean_text(plate.get("text"), 20):
            plates.append(clean_text(plate.get("text"), 20))
        vehicle = det.enrichment.get("vehicle")
        if isinstance(vehicle, Mapping) and clean_text(vehicle.get("plate"), 20):
            plates.append(clean_text(vehicle.get("plate"), 20))
        sub_label = facts.get("sub_label")
        if isinstance(sub_label, Mapping) and sub_label.get("kind") not in ("face", "known_plate"):
            text = f"{clean_text(sub_label.get('name'), 64)} ({clean_text(sub_label.get('kind'), 16)})"
            sub_labels.append(text)
        if isinstance(facts.get("delivery"), str):
            delivery = clean_text(facts["delivery"], 32) or delivery
    since = min(started) if started else None
    last = members[-1]
    centres = [det.centre for det in members if det.centre is not None]
    travel = max((math.dist(centres[0], c) for c in centres), default=0.0)
    return {
        "travel": round(travel, 3),
        "entered_zones": list(dict.fromkeys(entered))[:32],
        "tracked_since": since,
        "tracked_s": round(max(0.0, (last.ts - since).total_seconds()), 1) if since else 0.0,
        "stationary": last.frigate.get("stationary") is True,
        "attributes": dict(sorted(attributes.items())[:16]),
        "delivery": delivery,
        "plates": list(dict.fromkeys(plates))[:8],
        "sub_labels": list(dict.fromkeys(sub_labels))[:8],
    }


def _time_of_day(hour: int) -> Literal["night", "morning", "afternoon", "evening"]:
    if hour >= 22 or hour < 5:
        return "night"
    if hour < 12:
        return "morning"
    if hour < 17:
        return "afternoon"
    return "evening"


def _centre(bbox: Any) -> tuple[float, float] | None:
    """The centre of a normalised [x1, y1, x2, y2] box; None when the record has none (bbox is optional)."""
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
        return None
    numbers = [_number(v) for v in bbox]
    if any(n is None for n in numbers):
        return None
    x1, y1, x2, y2 = (float(n) for n in numbers if n is not None)
    return (x1 + x2) / 2, (y1 + y2) / 2


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


class _Det:
    """A normalised detection record (internal)."""

    __slots__ = (
        "id",
        "ts",
        "label",
        "confidence",
        "zone",
        "zones",
        "entered",
        "track_id",
        "is_late",
        "fast_path",
        "enrichment",
        "frigate",
        "centre",
    )

    def __init__(self, raw: Mapping[str, Any], fast_labels: frozenset[str], fast_confidence: float):
        self.id = str(raw["detection_id"])
        self.ts = _as_datetime(raw["ts"])
        self.label = clean_text(raw.get("label"), 64) or "unknown"
        self.confidence = float(raw.get("confidence") or 0.0)
        self.zone = clean_text(raw.get("zone"), 64) or None
        self.track_id = clean_text(raw.get("track_id"), 64) or None
        self.is_late = bool(raw.get("is_late"))
        self.fast_path = self.label in fast_labels and self.confidence >= fast_confidence
        enrichment = raw.get("enrichment")
        self.enrichment: Mapping[str, Any] = enrichment if isinstance(enrichment, Mapping) else {}
        frigate = self.enrichment.get("frigate")
        self.frigate: Mapping[str, Any] = frigate if isinstance(frigate, Mapping) else {}
        self.centre = _centre(raw.get("bbox"))
        # Frigate's zone lists (the `zone` text joins them for display); a record from elsewhere has its one zone
        if "current_zones" in self.frigate or "entered_zones" in self.frigate:
            self.zones = _names(self.frigate.get("current_zones"))
        else:
            self.zones = [self.zone] if self.zone else []
        self.entered = _names(self.frigate.get("entered_zones"))

    @property
    def group(self) -> str:
        return f"t:{self.track_id}" if self.track_id else f"d:{self.id}"

    @property
    def detection_id(self) -> str:  # DetectionItem's name for it (the item is read from these attributes)
        return self.id


class _GroupAcc:
    """Accumulates GroupRef fields over the detections of one group."""

    def __init__(self) -> None:
        self.track_id: str | None = None
        self.ids: list[str] = []
        self.labels: Counter[str] = Counter()
        self.max_conf = 0.0
        self.fast = False
        self.late = False

    def add(self, det: _Det) -> None:
        self.track_id = det.track_id
        if det.id not in self.ids:
            self.ids.append(det.id)
        self.labels[det.label] += 1
        self.max_conf = max(self.max_conf, det.confidence)
        self.fast = self.fast or det.fast_path
        self.late = self.late or det.is_late

    def ref(self) -> dict[str, Any]:
        return {
            "track_id": self.track_id,
            "detection_ids": list(self.ids),
            "label": self.labels.most_common(1)[0][0] if self.labels else "unknown",
            "max_confidence": round(self.max_conf, 4),
            "fast_path": self.fast,
            "late": self.late,
        }


# ----------------------------------------------------------------------------------------------- sections
def _summarise_detections(batch: BatchInfo, dets: list[_Det], tz: ZoneInfo, lighting: str | None) -> DetectionsSummary:
    confidences = [d.confidence for d in dets]
    tracks: dict[str, list[_Det]] = {}
    for det in dets:
        if det.track_id:
            tracks.setdefault(det.track_id, []).append(det)
    track_summaries = [
        TrackSummary(
            track_id=track_id,
            labels=dict(Counter(d.label for d in members).most_common()),
            first_ts=members[0].ts,
            last_ts=members[-1].ts,
            dwell_s=round((members[-1].ts - members[0].ts).total_seconds(), 1),
            detections=len(members),
            zones=list(dict.fromkeys(z for d in members for z in d.zones)),
            max_confidence=max(d.confidence for d in members),
            **_track_facts(members),
        )
        for track_id, members in tracks.items()
    ]
    first = dets[0].ts if dets else batch.started_at
    last = dets[-1].ts if dets else batch.last_ts
    local_first, local_last = first.astimezone(tz), last.astimezone(tz)
    time_of_day = _time_of_day(local_first.hour)
    return DetectionsSummary(
        count=len(dets),
        late_count=sum(d.is_late for d in dets),
        by_label=dict(Counter(d.label for d in dets).most_common()),
        confidence_min=min(confidences) if confidences else None,
        confidence_max=max(confidences) if confidences else None,
        confidence_mean=round(fmean(confidences), 4) if confidences else None,
        zones=dict(Counter(z for d in dets for z in d.zones).most_common()),
        tracks=track_summaries,
        first_ts=first,
        last_ts=last,
        span_s=round((last - first).total_seconds(), 1),
        timezone=str(tz.key),
        local_start=local_first.strftime("%Y-%m-%d %H:%M:%S"),
        local_end=local_last.strftime("%Y-%m-%d %H:%M:%S"),
        time_of_day=time_of_day,
        lighting=lighting,
        is_dark=lighting == "night" or (lighting is None and time_of_day == "night"),
        items=[DetectionItem.model_validate(d, from_attributes=True) for d in dets],
    )


def _summarise_scene(dets: list[_Det]) -> SceneSummary | None:
    descriptions: list[str] = []
    lighting: Counter[str] = Counter()
    indoor: list[bool] = []
    for det in dets:
        scene = det.enrichment.get("scene")
        if not isinstance(scene, Mapping):
            continue
        description = clean_text(scene.get("description"))
        if description and description not in descriptions and len(descriptions) < 5:
            descriptions.append(description)
        light = clean_text(scene.get("lighting"), 16).lower()
        if light:
            lighting[light] += 1
        if isinstance(scene.get("indoor"), bool):
            indoor.append(scene["indoor"])
    if not descriptions and not lighting and not indoor:
        return None
    return SceneSummary(
        descriptions=descriptions,
        lighting=dict(lighting.most_common()),
        indoor=(Counter(indoor).most_common(1)[0][0] if indoor else None),
    )


def _summarise_florence(dets: list[_Det]) -> FlorenceSummary | None:
    """One entry per detection with something new; repeats and track duplicates are dropped and counted."""
    entries: list[FlorenceEntry] = []
    seen_by_group: dict[str, set[frozenset[str]]] = {}
    regions_total = regions_repeat = duplicates = 0
    found = False
    for det in dets:
        payload = det.enrichment.get("florence")
        if not isinstance(payload, Mapping):
            continue
        found = True
        seen = seen_by_group.setdefault(det.group, set())
        caption = clean_text(payload.get("caption"))
        dense = clean_text(payload.get("dense_caption"))
        dense_tokens = content_tokens(dense)
        reference = content_tokens(caption) | dense_tokens
        if caption and dense and is_repeat(content_tokens(caption), dense_tokens):
            caption = ""  # the dense caption already says everything the global caption says
        kept: dict[str, list] = {"captions": [], "dense_captions": [], "regions": []}
        for text, bucket in ((caption, "captions"), (dense, "dense_captions")):
            if not text:
                continue
            key = frozenset(content_tokens(text)) or frozenset({text.lower()})
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            kept[bucket].append(text)
        regions = payload.get("regions")
        for region in regions if isinstance(regions, list) else ():
            if not isinstance(region, Mapping):
                continue
            label = clean_text(region.get("label"), 64)
            text = clean_text(region.get("caption")) or label
            if not text:
                continue
            regions_total += 1
            tokens = content_tokens(text)
            if is_repeat(tokens, reference):
                regions_repeat += 1
                continue
            key = frozenset(tokens)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            kept["regions"].append(RegionCaption(label=label or "region", caption=text))
        if kept["captions"] or kept["dense_captions"] or kept["regions"]:
            acc = _GroupAcc()
            acc.add(det)
            entries.append(
                FlorenceEntry(
                    **acc.ref(),
                    ts=det.ts,
                    captions=kept["captions"],
                    dense_captions=kept["dense_captions"],
                    regions=kept["regions"],
                )
            )
    if not found:
        return None
    return FlorenceSummary(
        entries=entries,
        regions_total=regions_total,
        regions_dropped_repeat=regions_repeat,
        duplicates_dropped=duplicates,
    )


def _summarise_clip(dets: list[_Det], threshold: float) -> ClipSummary | None:
    groups: dict[str, tuple[_GroupAcc, dict[str, float]]] = {}
    dropped = 0
    for det in dets:
        payload = det.enrichment.get("clip")
        if not isinstance(payload, list):
            continue
        acc, best = groups.setdefault(det.group, (_GroupAcc(), {}))
        acc.add(det)
        for item in payload:
            if not isinstance(item, Mapping):
                continue
            label, score = clean_text(item.get("label"), 80), _number(item.get("score"))
            if not label or score is None:
                continue
            if score < threshold:
                dropped += 1
                continue
            best[label] = max(best.get(label, 0.0), score)
    if not groups:
        return None
    entries = []
    for acc, best in groups.values():
        if best:
            top = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CLIP_CLASSES]
            entries.append(ClipEntry(**acc.ref(), classes=[ClipClass(label=k, score=round(v, 4)) for k, v in top]))
    return ClipSummary(threshold=threshold, entries=entries, dropped_below_threshold=dropped)


def _field_value(value: Any) -> str | bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return clean_text(", ".join(str(v) for v in value if isinstance(v, (str, int, float))))
    if isinstance(value, str):
        return clean_text(value)
    return None


def _summarise_observations(kind: str, dets: list[_Det]) -> list[Observation]:
    keys = OBSERVATION_FIELDS[kind]
    groups: dict[tuple, tuple[_GroupAcc, dict[str, str | bool | None], dict[str, list[float]], list[int]]] = {}
    for det in dets:
        payload = det.enrichment.get(kind)
        if not isinstance(payload, Mapping):
            continue
        fields: dict[str, str | bool | None] = {}
        numbers: dict[str, float] = {}
        for key in keys:
            if key not in payload:
                continue
            number = _number(payload[key])
            if number is not None:
                numbers[key] = number
            else:
                fields[key] = _field_value(payload[key])
        if not fields and not numbers:
            continue
        scope = "batch" if kind in BATCH_SCOPED_TYPES else det.group
        group_key = (scope, tuple(sorted((k, repr(v)) for k, v in fields.items())))
        acc, kept_fields, series, count = groups.setdefault(group_key, (_GroupAcc(), fields, {}, [0]))
        acc.add(det)
        count[0] += 1
        for key, number in numbers.items():
            series.setdefault(key, []).append(number)
    observations = []
    for (scope, _), (acc, fields, series, count) in groups.items():
        ref = acc.ref()
        if scope == "batch":
            ref["track_id"] = None
        observations.append(
            Observation(
                **ref,
                fields=fields,
                numbers={
                    key: NumberRange(
                        min=min(vals),
                        max=max(vals),
                        first=vals[0],
                        last=vals[-1],
                        top=sorted(vals, reverse=True)[:TOP_READINGS],
                    )
                    for key, vals in series.items()
                },
                count=count[0],
            )
        )
    return observations


def _review_facts(rows: Iterable[Mapping[str, Any]]) -> list[ReviewFacts]:
    """Review rows (storage.frigate.reviews_covering) as bounded, cleaned facts; unreadable rows skipped."""
    facts = []
    for row in rows:
        try:
            raw = row.get("summary")
            summary: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            level = row.get("threat_level")
            confidence = _number(summary.get("confidence"))
            facts.append(
                ReviewFacts(
                    review_id=clean_text(row.get("review_id"), 64) or "?",
                    start=_as_datetime(row["start_time"]),
                    end=_as_datetime(row["end_time"]) if row.get("end_time") else None,
                    severity=clean_text(row.get("severity"), 32) or None,
                    threat_level=level if isinstance(level, int) and level in (0, 1, 2) else None,
                    objects=_names(list(row.get("objects") or []))[:10],
                    zones=_names(list(row.get("zones") or []))[:10],
                    title=clean_text(summary.get("title"), 120) or None,
                    summary=clean_text(summary.get("shortSummary")) or None,
                    scene=clean_text(summary.get("scene")) or None,
                    observations=_names(list(summary.get("observations") or []), MAX_TEXT_CHARS)[:MAX_REVIEW_LINES],
                    other_concerns=_names(list(summary.get("other_concerns") or []), MAX_TEXT_CHARS)[:MAX_REVIEW_LINES],
                    confidence=confidence if confidence is not None and 0 <= confidence <= 1 else None,
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(facts, key=lambda r: (r.start, r.review_id))[:MAX_REVIEWS]


# ----------------------------------------------------------------------------------------------- entry point
def build_context(
    batch: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    *,
    quality_level: str,
    clip_noise_threshold: float,
    camera_profile: CameraProfile | None = None,
    missing_types: Iterable[str] = (),
    fast_path_labels: Iterable[str] = ("person",),
    fast_path_confidence: float = 0.90,
    history: HistoryFacts | None = None,
    reviews: Iterable[Mapping[str, Any]] = (),
) -> EnrichedContext:
    """Summarise one batch. `missing_types` are enrichment types that did not arrive within the time limit;
    `history` the batch's history facts (storage/history.py + core/context/history.py), rendered as two sections;
    `reviews` Frigate's review items over the batch's time span (storage.frigate.reviews_covering)."""
    if quality_level not in QUALITY_LEVEL_TYPES:
        raise ValueError(
            f"quality_level={quality_level!r} is invalid: accepted values are {sorted(QUALITY_LEVEL_TYPES)}"
        )
    missing = sorted(set(missing_types))
    unknown = [t for t in missing if t not in ENRICHMENT_TYPES]
    if unknown:
        raise ValueError(f"unknown enrichment types in missing_types: {unknown}; known: {list(ENRICHMENT_TYPES)}")
    info = BatchInfo(
        batch_id=str(batch["batch_id"]),
        camera_id=str(batch["camera_id"]),
        started_at=_as_datetime(batch["started_at"]),
        last_ts=_as_datetime(batch.get("last_ts") or batch["started_at"]),
        closes_at=_as_datetime(batch["closes_at"]) if batch.get("closes_at") else None,
        close_reason=str(batch.get("close_reason") or "window"),
        detection_count=int(batch.get("detection_count") or len(detections)),
    )
    fast_labels = frozenset(fast_path_labels)
    dets = sorted((_Det(d, fast_labels, fast_path_confidence) for d in detections), key=lambda d: (d.ts, d.id))
    if info.close_reason == "fast_path":
        for det in dets:
            det.fast_path = True
    included = QUALITY_LEVEL_TYPES[quality_level]
    scene = _summarise_scene(dets)
    lighting = max(scene.lighting.items(), key=lambda kv: kv[1])[0] if scene and scene.lighting else None
    tz = camera_profile.tz if camera_profile is not None else ZoneInfo("UTC")
    return EnrichedContext(
        batch=info,
        quality_level=quality_level,  # type: ignore[arg-type]
        types_included=list(included),
        missing_types=missing,
        camera_profile=camera_profile,
        detections=_summarise_detections(info, dets, tz, lighting),
        scene=scene,
        florence=_summarise_florence(dets) if "florence" in included else None,
        clip=_summarise_clip(dets, clip_noise_threshold) if "clip" in included else None,
        observations={
            kind: obs
            for kind in included
            if kind in OBSERVATION_FIELDS and (obs := _summarise_observations(kind, dets))
        },
        history=history,
        reviews=_review_facts(reviews),
    )
