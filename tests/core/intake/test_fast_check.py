"""The msgspec fast check of ingestion (pure core): what it accepts, and the cases it must leave to the validator.

Its agreement with the validator over fuzzed lines is tested in tests/storage/test_ingest.py; here each rule it adds to
stay stricter than msgspec alone is pinned by an example that msgspec by itself would accept.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hsi_dagster.core.intake.detections import Bounds, Detection, Rejection, validate_record
from hsi_dagster.core.intake.fast_check import fast_check
from hsi_dagster.synthetic.jsonl import encode_record
from hsi_dagster.synthetic.streams import simulate

START = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
BASE = {
    "detection_id": "d-1",
    "camera_id": "front_door",
    "ts": "2026-12-01T01:00:00.000Z",
    "label": "person",
    "confidence": 0.5,
}


def verdicts(lines: list[str]) -> list[str]:
    chunk = fast_check([line.encode("utf-8") for line in lines])
    where = (
        {i: "accepted" for i in chunk.accepted_at}
        | {i: "refused" for i in chunk.refused_at}
        | {i: "blank" for i in chunk.blank_at}
    )
    return [where[i] for i in range(len(lines))]


def verdict(text: str, bounds: Bounds) -> str:
    chunk = fast_check([text.encode("utf-8")], bounds)
    return "accepted" if chunk.accepted_at else "refused" if chunk.refused_at else "blank"


def line(**changes: object) -> str:
    return json.dumps({**BASE, **changes})


def test_the_simulated_stream_passes_including_escaped_quotes_and_unknown_enrichment_keys() -> None:
    records = zip(range(3000), simulate(5, start=START, duration_s=6 * 3600, events_per_hour=200), strict=False)
    lines = [encode_record(record).decode("utf-8") for _, record in records]
    assert any('\\"' in text for text in lines) and any('"sam_masks"' in text for text in lines)
    assert set(verdicts(lines)) == {"accepted"}


@pytest.mark.parametrize(
    "text",
    [
        # a repeated key: msgspec keeps the last copy, the validator refuses the line
        '{"detection_id":"d-1","camera_id":"cam","ts":"2026-12-01T01:00:00Z","label":"car","label":"person","confidence":0.5}',
        line(enrichment={"scene": {"lighting": "day"}}).replace('{"scene"', '{"scene": {"lighting": "noon"}, "scene"'),
        line(enrichment={"scene": {"lighting": "day"}}).replace('{"lighting"', '{"lighting": "noon", "lighting"'),
        line(enrichment={"clip": [{"label": "a", "score": 0.5}]}).replace('{"label": "a"', '{"score": 7, "label": "a"'),
        # an escaped ':' would make up for the lost copy in the ':' count
        line(zone="a\\u003a").replace('"label": "person"', '"label": "car", "label": "person"').replace("\\\\", "\\"),
        # an unknown top-level field (the validator ignores it; the fast check cannot see what it skipped)
        line(extra={"a": 1}),
        # a known enrichment object with a field the contract does not know
        line(enrichment={"scene": {"lighting": "day", "tilt": 2}}),
    ],
)
def test_lines_msgspec_alone_would_misread_go_to_the_validator(text: str) -> None:
    assert verdicts([text]) == ["refused"]


def test_refused_lines_get_the_validators_verdict_either_way() -> None:
    nan_in_unknown_content = line(enrichment={"sam": {"n": float("nan")}})  # msgspec refuses NaN anywhere
    invalid = line(confidence=float("nan"))
    assert verdicts([nan_in_unknown_content, invalid]) == ["refused", "refused"]
    assert isinstance(validate_record(nan_in_unknown_content, source="t", line_no=1), Detection)
    assert isinstance(validate_record(invalid, source="t", line_no=2), Rejection)


@pytest.mark.parametrize(
    "text",
    [
        line(confidence=1.5),
        line(confidence=True),
        line(confidence="0.5"),
        line(label=""),
        line(detection_id="x" * 129),
        line(bbox=[0.1, 0.2, 0.3]),
        line(enrichment={"florence": {"regions": [{"bbox": [0.9, 0.1, 0.2, 0.5]}]}}),
        line(enrichment={"depth": {"distance_m": -1}}),
        '{"detection_id":"\\ud800","camera_id":"cam","ts":"2026-12-01T01:00:00Z","label":"car","confidence":0.5}',
        "[1, 2]",
        "{",
    ],
)
def test_rule_breaking_lines_are_refused(text: str) -> None:
    assert verdicts([text]) == ["refused"]
    assert isinstance(validate_record(text, source="t", line_no=1), Rejection)


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        (line(enrichment={"florence": {"caption": "c" * 2049}}), "enrichment.florence.caption: 2049 characters"),
        (line(enrichment={"clip": [{"label": "a", "score": 0.5}] * 65}), "enrichment.clip: 65 items"),
    ],
)
def test_enrichment_over_a_bound_is_refused_here_and_cut_by_the_validator(text: str, cut: str) -> None:
    """The fast check never cuts: what is over a bound goes to the validator, which keeps the detection cut."""
    assert verdicts([text]) == ["refused"]
    result = validate_record(text, source="t", line_no=1)
    assert isinstance(result, Detection) and len(result.cuts) == 1 and result.cuts[0].startswith(cut)


def test_unknown_enrichment_nested_past_the_depth_bound_goes_to_the_validator() -> None:
    deep: object = 1
    for _ in range(40):
        deep = {"k": deep}
    text = line(enrichment={"new_model": deep})
    assert verdicts([text]) == ["refused"]
    assert verdict(text, Bounds(enrichment_depth=64)) == "accepted"
    result = validate_record(text, source="t", line_no=1)
    assert isinstance(result, Detection) and result.cuts[0].startswith("enrichment.new_model: dropped, nested 41")


def test_a_checker_is_compiled_for_each_bounds() -> None:
    regions = line(enrichment={"florence": {"regions": [{"label": "door", "caption": "open"}] * 90}})
    assert verdicts([regions]) == ["refused"]
    assert [verdict(regions, Bounds(florence_regions=90))] == ["accepted"]


def test_blank_lines_are_told_apart() -> None:
    assert verdicts(["", "  \t\r", line()]) == ["blank", "blank", "accepted"]
