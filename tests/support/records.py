"""Contract records for tests: an enrichment with every type of the contract, and a record as the batching rules
see it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hsi_dagster.core.intake.batching import DetectionRef

_EVERY_TYPE: dict[str, Any] = {
    "florence": {
        "caption": "a person walking up the driveway",
        "dense_caption": "a person in a dark jacket walking up a paved driveway at night",
        "regions": [{"label": "jacket", "caption": "a zipped black jacket", "bbox": [0.2, 0.4, 0.4, 0.7]}],
    },
    "clip": [{"label": "a person walking", "score": 0.8}],
    "scene": {"description": "a driveway at night with two parked cars", "lighting": "night", "indoor": False},
    "pose": {"posture": "walking", "score": 0.7},
    "action": {"label": "walking", "score": 0.6},
    "pet": {"species": "none seen", "score": 0.1},
    "weather": {"condition": "clear", "visibility": "good"},
    "vehicle": {"type": "sedan", "color": "grey", "plate": "AB12 CDE", "damage": "none visible"},
    "clothing": {"description": "dark jacket and jeans", "suspicious": False},
    "violence": {"score": 0.02},
    "depth": {"distance_m": 6.5},
    "reid": {"identity": "unknown visitor", "known": False, "score": 0.3, "seen_before": False},
}


def every_enrichment() -> dict[str, Any]:
    """A person walking up a driveway at night, seen by every vision model of the contract (ENRICHMENT_SPEC), each
    text a plain sentence. A fresh copy: callers change fields in place."""
    return copy.deepcopy(_EVERY_TYPE)


def detection_ref(record: dict[str, Any]) -> DetectionRef:
    """A contract record (as written to a file) as the batching rules see it."""
    ts = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).astimezone(UTC)
    return DetectionRef(record["detection_id"], record["camera_id"], ts, record["label"], float(record["confidence"]))
