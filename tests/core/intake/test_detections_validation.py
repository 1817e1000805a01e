"""Validation of one record (contract section 1): what is accepted, and that every refusal names its field."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hsi_dagster.core.intake.detections import (
    MAX_LINE_BYTES,
    RAW_MAX_CHARS,
    Bounds,
    Detection,
    Rejection,
    json_depth,
    loads_enrichment,
    validate_record,
)
from hsi_dagster.synthetic.bad_lines import BAD_KINDS, bad_lines

BASE = {
    "detection_id": "det-1",
    "camera_id": "front_door",
    "ts": "2026-12-01T02:14:05.120Z",
    "label": "person",
    "confidence": 0.93,
}


def line(**changes: object) -> str:
    record = dict(BASE)
    for key, value in changes.items():
        if value is _DROP:
            record.pop(key)
        else:
            record[key] = value
    return json.dumps(record)


_DROP = object()


def check(text: str | bytes) -> Detection | Rejection:
    return validate_record(text, source="test.jsonl", line_no=7)


def rejected(text: str | bytes) -> Rejection:
    result = check(text)
    assert isinstance(result, Rejection), result
    assert result.source == "test.jsonl" and result.line_no == 7
    return result


def test_minimal_record_becomes_a_detection_in_utc() -> None:
    result = check(line())
    assert isinstance(result, Detection)
    assert result.ts == datetime(2026, 12, 1, 2, 14, 5, 120000, tzinfo=UTC)
    assert (result.bbox, result.track_id, result.zone, result.enrichment) == (None, None, None, None)


def test_offsets_are_converted_and_fractions_truncated_to_microseconds() -> None:
    result = check(line(ts="2026-12-01T08:44:05.1234569+06:30"))
    assert isinstance(result, Detection)
    assert result.ts == datetime(2026, 12, 1, 2, 14, 5, 123456, tzinfo=UTC)


def test_optional_fields_are_kept_and_null_means_absent() -> None:
    result = check(
        line(bbox=[0.1, 0.2, 0.5, 0.9], track_id="t-1", zone="porch", enrichment={"scene": {"lighting": "night"}})
    )
    assert isinstance(result, Detection)
    assert result.bbox == (0.1, 0.2, 0.5, 0.9) and result.track_id == "t-1" and result.zone == "porch"
    assert result.enrichment == {"scene": {"lighting": "night"}}
    nulls = check(line(bbox=None, track_id=None, zone=None, enrichment=None))
    assert isinstance(nulls, Detection) and nulls.bbox is None and nulls.enrichment is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (line(confidence=1.7), "confidence: must be a number between 0 and 1, got 1.7"),
        (line(bbox=[0.6, 0.1, 0.2, 0.5]), "bbox: x1 must be < x2"),
        (line(ts="2026-12-01T02:14:05.120"), "ts: not RFC 3339 with an offset"),
        ('{"detection_id": "x",', "line: not valid JSON ("),
        ("x" * (MAX_LINE_BYTES + 1), f"line: longer than {MAX_LINE_BYTES} bytes"),
        (line(camera_id="front door"), "camera_id: must match [A-Za-z0-9_.-]{1,64}"),
    ],
)
def test_reasons_of_the_brief(text: str, reason: str) -> None:
    assert rejected(text).reason.startswith(reason)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"confidence": True}, "confidence"),  # a boolean is not a number
        ({"confidence": "0.9"}, "confidence"),
        ({"detection_id": 5}, "detection_id"),
        ({"detection_id": "a\u0001b"}, "detection_id"),
        ({"label": ""}, "label"),
        ({"label": "x" * 65}, "label"),
        ({"track_id": "t" * 129}, "track_id"),
        ({"zone": 3}, "zone"),
        ({"ts": "2026-12-01 02:14:05Z"}, "ts"),
        ({"ts": "2026-12-01T02:14:60Z"}, "ts"),
        ({"ts": "1969-12-31T23:59:59Z"}, "ts"),
        ({"ts": "2200-01-01T00:00:00Z"}, "ts"),
        ({"bbox": [0.1, 0.2, 0.3, True]}, "bbox"),
        ({"bbox": [0.1, 0.5, 0.3, 0.5]}, "bbox"),
        ({"enrichment": {"clip": [{"label": "a dog", "score": -0.1}]}}, "enrichment.clip[0].score"),
        ({"enrichment": {"florence": {"regions": ["door"]}}}, "enrichment.florence.regions[0]"),
        ({"enrichment": {"reid": {"score": True}}}, "enrichment.reid.score"),
        ({"enrichment": {"depth": {"distance_m": 1e309}}}, "enrichment.depth.distance_m"),
        ({"detection_id": _DROP}, "detection_id"),
        ({"confidence": None}, "confidence"),
    ],
)
def test_each_rule_names_its_field(changes: dict, field: str) -> None:
    assert rejected(line(**changes)).field == field


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_confidence_is_refused_naming_the_field(literal: str) -> None:
    text = line(confidence="@@").replace('"@@"', literal)
    assert rejected(text).field == "confidence"


@pytest.mark.parametrize("kind", sorted(BAD_KINDS))
def test_every_kind_of_generated_bad_line_is_refused_with_its_field(kind: str) -> None:
    samples = [b for b in bad_lines(3, 3 * len(BAD_KINDS)) if b.kind == kind]
    assert samples
    for sample in samples:
        assert rejected(sample.line).field == sample.field, sample.line[:200]


def test_not_an_object_and_bad_bytes() -> None:
    assert rejected("[1, 2]").reason == "line: must be a JSON object, got an array [1,2]"
    assert rejected(b'{"a": "\xff"}').reason.startswith("line: not valid UTF-8")
    assert rejected("").reason == "line: empty"
    assert rejected('{"a": "\ud800"}').field == "line"  # a str that cannot be UTF-8


def test_duplicates_of_known_fields_are_refused_elsewhere_ignored() -> None:
    assert rejected(line()[:-1] + ', "confidence": 0.1}').reason == "confidence: appears more than once in the object"
    inner = line(enrichment={"scene": {"lighting": "day"}}).replace(
        '"lighting": "day"', '"lighting": "day", "lighting": "x"'
    )
    assert rejected(inner).field == "enrichment.scene.lighting"
    unknown = line(vendor={"a": 1}).replace('"a": 1', '"a": 1, "a": 2')
    assert isinstance(check(unknown), Detection)


def test_unknown_fields_are_ignored_at_the_top_and_kept_in_enrichment() -> None:
    enrichment = {"sam_masks": {"count": 2}, "scene": {"lighting": "dusk", "camera_tilt": 3}}
    result = check(line(firmware="1.2", enrichment=enrichment))
    assert isinstance(result, Detection)
    assert result.enrichment == enrichment
    assert loads_enrichment(result.enrichment_json()) == enrichment


def test_raw_text_is_bounded() -> None:
    huge = line(enrichment={"florence": {"caption": "c" * (1 << 20)}})
    rejection = rejected(huge)
    assert rejection.field == "line"
    assert len(rejection.raw) < RAW_MAX_CHARS + 100 and rejection.raw.startswith('{"detection_id"')


def test_a_detection_survives_a_round_trip() -> None:
    first = check(line(bbox=[0, 0, 1, 1], enrichment={"clip": [{"label": "a cat", "score": 0.2}]}))
    assert isinstance(first, Detection)
    assert check(json.dumps(first.to_record())) == first


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["detection_id", "camera_id", "ts", "label", "confidence", "bbox", "track_id", "zone", "enrichment"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_never_raises_on_arbitrary_input(data: str | bytes) -> None:
    assert isinstance(check(data), (Detection, Rejection))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS, JSON_VALUES, max_size=4), st.sampled_from(["", "enrichment"]))
def test_never_raises_on_records_with_wrong_values(changes: dict, nest: str) -> None:
    record = dict(BASE, **({"enrichment": changes} if nest else changes))
    result = check(json.dumps(record))
    assert isinstance(result, (Detection, Rejection))
    if isinstance(result, Rejection):
        assert result.field.split(".")[0].split("[")[0] in {*BASE, "bbox", "track_id", "zone", "enrichment", "line"}


# ----------------------------------------------------------------------------------------- bounds (contract 6)
REGION = {"label": "person", "caption": "a man in a dark hoodie", "bbox": [0.1, 0.1, 0.4, 0.9]}


def test_ninety_florence_regions_are_cut_to_the_bound_and_the_detection_kept() -> None:
    text = line(
        label="person", confidence=0.95, enrichment={"florence": {"caption": "a man", "regions": [REGION] * 90}}
    )
    result = check(text)
    assert isinstance(result, Detection)
    assert result.enrichment is not None and len(result.enrichment["florence"]["regions"]) == 64
    assert result.enrichment["florence"]["caption"] == "a man"
    assert result.cuts == (
        "enrichment.florence.regions: 90 items cut to the first 64 (INGEST_MAX_FLORENCE_REGIONS=64)",
    )
    assert json.loads(result.cuts_json() or "null") == list(result.cuts)


def test_each_bound_is_a_parameter() -> None:
    text = line(enrichment={"florence": {"regions": [REGION] * 90}, "clip": [{"label": "a", "score": 0.5}] * 5})
    roomy = validate_record(text, source="t", line_no=1, bounds=Bounds(florence_regions=100))
    assert isinstance(roomy, Detection) and roomy.cuts == () and roomy.cuts_json() is None
    tight = validate_record(text, source="t", line_no=1, bounds=Bounds(florence_regions=3, clip_classes=2))
    assert isinstance(tight, Detection) and tight.enrichment is not None
    assert len(tight.enrichment["florence"]["regions"]) == 3 and len(tight.enrichment["clip"]) == 2
    assert [cut.split(":")[0] for cut in tight.cuts] == ["enrichment.florence.regions", "enrichment.clip"]


def test_a_text_over_its_bound_is_cut_to_it() -> None:
    result = validate_record(
        line(enrichment={"scene": {"description": "d" * 50}}), source="t", line_no=1, bounds=Bounds(text_chars=20)
    )
    assert isinstance(result, Detection) and result.enrichment == {"scene": {"description": "d" * 20}}
    assert result.cuts == ("enrichment.scene.description: 50 characters cut to 20 (INGEST_MAX_TEXT_CHARS=20)",)


def test_enrichment_over_its_byte_bound_loses_its_largest_keys_first() -> None:
    enrichment = {"scene": {"lighting": "night"}, "extra_model": ["y" * 1000] * 40, "pose": {"posture": "standing"}}
    result = check(line(enrichment=enrichment))
    assert isinstance(result, Detection)
    assert result.enrichment == {"scene": {"lighting": "night"}, "pose": {"posture": "standing"}}
    assert len(result.cuts) == 1 and result.cuts[0].startswith("enrichment.extra_model: dropped")
    assert "INGEST_MAX_ENRICHMENT_BYTES=32768" in result.cuts[0]


def _nested(levels: int) -> object:
    value: object = "x"
    for _ in range(levels):
        value = [value]
    return value


def _nested_line(levels: int) -> str:
    """A record whose enrichment.new_model is `levels` lists deep, written as text (json.dumps would recurse)."""
    text = line(enrichment={"scene": {"lighting": "night"}, "new_model": "NESTED"})
    return text.replace('"NESTED"', "[" * levels + '"x"' + "]" * levels)


def test_an_enrichment_key_nested_past_the_depth_bound_is_dropped_and_the_detection_kept() -> None:
    """Hundreds of levels decode, but later readers of the stored JSON recurse on them: the key is cut at the bound.
    (500, not ~1000: how deep json.loads can go depends on the caller's stack, e.g. a pytest-xdist worker's.)"""
    for levels in (32, 500):
        result = check(_nested_line(levels))
        assert isinstance(result, Detection)
        assert result.enrichment == {"scene": {"lighting": "night"}}
        assert result.cuts == (
            f"enrichment.new_model: dropped, nested {levels + 1} levels deep (INGEST_MAX_ENRICHMENT_DEPTH=32)",
        )
    kept = check(line(enrichment={"new_model": _nested(31)}))
    assert isinstance(kept, Detection) and kept.cuts == () and kept.enrichment == {"new_model": _nested(31)}


def test_json_depth_counts_levels_without_recursion() -> None:
    assert [json_depth(v) for v in ("x", {}, [1], {"a": [{"b": 1}]}, _nested(5000))] == [0, 1, 1, 3, 5000]


def test_items_past_the_bound_are_not_read() -> None:
    """A malformed region past the bound is dropped with the rest, not a reason to lose the detection."""
    text = line(enrichment={"florence": {"regions": [REGION] * 64 + ["not an object"]}})
    result = check(text)
    assert isinstance(result, Detection) and len(result.cuts) == 1


@pytest.mark.parametrize(
    ("changes", "bounds", "reason"),
    [
        (
            {"label": "l" * 11},
            Bounds(label_chars=10),
            "label: must be 1-10 characters without control characters (INGEST_MAX_LABEL_CHARS)",
        ),
        (
            {"track_id": "t" * 11},
            Bounds(tag_chars=10),
            "track_id: must be 1-10 characters without control characters (INGEST_MAX_TAG_CHARS)",
        ),
        ({"zone": "z" * 11}, Bounds(tag_chars=10), "zone: must be 1-10 characters"),
    ],
)
def test_required_and_identifying_fields_over_a_bound_quarantine_naming_it(
    changes: dict, bounds: Bounds, reason: str
) -> None:
    result = validate_record(line(**changes), source="t", line_no=1, bounds=bounds)
    assert isinstance(result, Rejection) and result.reason.startswith(reason)


def test_the_line_bound_and_the_raw_bound_are_parameters() -> None:
    text = line(enrichment={"scene": {"description": "d" * 500}})
    result = validate_record(text, source="t", line_no=1, bounds=Bounds(line_bytes=300, raw_chars=50))
    assert isinstance(result, Rejection)
    assert result.reason == f"line: longer than 300 bytes ({len(text)}; INGEST_MAX_LINE_BYTES)"
    assert result.raw.startswith(text[:50] + "...[truncated")


def test_a_bound_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="INGEST_MAX_FLORENCE_REGIONS must be >= 1"):
        Bounds(florence_regions=0)
