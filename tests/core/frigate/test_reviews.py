"""core/frigate/reviews.py: Frigate's review items (MQTT `reviews`, `/api/review`) read leniently, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from hsi_dagster.core.frigate.mapping import payload_kind
from hsi_dagster.core.frigate.reviews import Review, map_review, map_review_item

START = 1796740200.0


def review(**changes: Any) -> dict[str, Any]:
    after = {
        "id": f"{START:.6f}-rv1",
        "camera": "front_door",
        "start_time": START,
        "end_time": START + 40,
        "severity": "alert",
        "thumb_path": "/media/frigate/clips/review/thumb.webp",
        "data": {
            "detections": ["1796740200.000000-p1"],
            "objects": ["person"],
            "sub_labels": [["alice", 0.93]],
            "zones": ["walkway", "front_door"],
            "audio": [],
            "metadata": {
                "title": "Person prying the front door",
                "scene": "A man in a balaclava works at the door frame with a bar.",
                "shortSummary": "Someone is forcing the front door at night.",
                "observations": ["crowbar at the lock", "looks over his shoulder"],
                "confidence": 0.8,
                "potential_threat_level": 2,
                "other_concerns": ["face covered"],
            },
        },
    }
    after.update(changes)
    return after


def test_a_genai_review_message_gives_severity_span_and_the_summary() -> None:
    payload = {"type": "genai", "before": review(), "after": review()}
    assert payload_kind(payload) == "reviews"
    got = map_review(payload)
    assert isinstance(got, Review) and got.ignored == ()
    assert (got.review_id, got.camera_id, got.kind, got.severity) == (
        f"{START:.6f}-rv1",
        "front_door",
        "genai",
        "alert",
    )
    assert (got.start, got.end, got.threat_level) == (START, START + 40, 2)
    assert got.zones == ("walkway", "front_door") and got.detections == ("1796740200.000000-p1",)
    assert got.summary["observations"] == ["crowbar at the lock", "looks over his shoulder"]
    assert (
        got.summary["shortSummary"] == "Someone is forcing the front door at night."
        and got.summary["confidence"] == 0.8
    )


def test_an_api_review_item_is_the_same_without_the_envelope() -> None:
    got = map_review_item(review(end_time=None, data={"objects": ["car"]}))
    assert isinstance(got, Review) and got.kind == "api" and got.end is None and got.summary == {}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"severity": "panic"}, "after.severity"),
        ({"data": "lots"}, "after.data:"),
        ({"data": {"objects": "person"}}, "after.data.objects:"),
        ({"data": {"zones": [3]}}, "after.data.zones[0]"),
        ({"data": {"metadata": "bad"}}, "after.data.metadata:"),
        ({"data": {"metadata": {"potential_threat_level": 7}}}, "after.data.metadata.potential_threat_level"),
        ({"data": {"metadata": {"potential_threat_level": "2"}}}, "after.data.metadata.potential_threat_level"),
        ({"data": {"metadata": {"observations": "one"}}}, "after.data.metadata.observations:"),
        ({"data": {"metadata": {"confidence": 3}}}, "after.data.metadata.confidence"),
        ({"end_time": "later"}, "after.end_time"),
    ],
)
def test_a_part_of_unknown_shape_is_ignored_with_a_reason(changes: dict[str, Any], reason: str) -> None:
    got = map_review({"type": "update", "after": review(**changes)})
    assert isinstance(got, Review), got
    assert any(line.startswith(reason) for line in got.ignored), got.ignored
    assert got.threat_level in (None, 2)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"type": "moved", "after": review()}, "type"),
        ({"type": "new", "after": None}, "after"),
        ({"type": "new", "after": review(id=None)}, "after.id"),
        ({"type": "new", "after": review(camera=7)}, "after.camera"),
        ({"type": "new", "after": review(start_time="now")}, "after.start_time"),
    ],
)
def test_a_review_without_id_camera_or_start_is_refused_naming_the_field(payload: dict[str, Any], field: str) -> None:
    reason = map_review(payload)
    assert isinstance(reason, str) and reason.split(":", 1)[0] == field
