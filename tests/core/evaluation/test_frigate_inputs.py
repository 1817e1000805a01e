"""What `hsi eval --inputs frigate` leaves of a detection: the detector's record, a recognition, a plate and a
caption (Frigate's GenAI description); none of the other vision models."""

from __future__ import annotations

import copy
from typing import Any

from hsi_dagster.core.evaluation.frigate_inputs import frigate_enrichment, frigate_like

DETECTION: dict[str, Any] = {
    "detection_id": "s1-000",
    "camera_id": "front_door",
    "ts": "2026-12-01T02:14:05Z",
    "label": "person",
    "confidence": 0.8,
    "bbox": [0.2, 0.2, 0.5, 0.9],
    "zone": "porch",
    "track_id": "t1",
    "enrichment": {
        "florence": {"caption": "a man at the door", "dense_caption": "a man with a crowbar", "regions": [{}]},
        "scene": {"description": "porch at night", "lighting": "night", "indoor": False},
        "action": {"label": "prying door", "score": 0.9},
        "violence": {"score": 0.8},
        "clothing": {"description": "balaclava", "suspicious": True},
        "pose": {"posture": "crouching", "score": 0.7},
        "clip": [{"label": "burglar", "score": 0.6}],
        "vehicle": {"type": "van", "color": "white", "plate": "AB12 CDE", "damage": "none"},
        "reid": {"identity": "resident:alice", "known": True, "seen_before": True, "score": 0.9},
        "depth": {"distance_m": 2.0},
        "weather": {"condition": "rain", "visibility": "poor"},
    },
}


def test_only_what_frigate_sends_is_left() -> None:
    original = copy.deepcopy(DETECTION)
    [cut] = frigate_like([DETECTION])
    assert original == DETECTION  # the scenario itself is not changed
    assert {k: v for k, v in cut.items() if k != "enrichment"} == {
        k: v for k, v in DETECTION.items() if k != "enrichment"
    }
    assert cut["enrichment"] == {
        "reid": {"identity": "resident:alice", "known": True, "score": 0.9},
        "vehicle": {"plate": "AB12 CDE"},
        "florence": {"caption": "a man at the door"},
    }


def test_a_stranger_is_no_recognition_and_odd_shapes_are_nothing() -> None:
    stranger = {"reid": {"identity": "unknown-7", "known": False, "seen_before": True}, "vehicle": {"type": "van"}}
    assert frigate_enrichment(stranger) == {}
    assert frigate_enrichment(None) == {} and frigate_enrichment({"reid": "alice", "florence": ["x"]}) == {}
