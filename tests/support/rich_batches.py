"""The batch of issue #15 item 10: 6 person detections at night in the garage, rich Florence regions on each.

With CTX_SIZE=8192, PARALLEL=2 and the default output and margin, its prompt did not fit the slot after every
section removal and the shortening (PromptTooLarge), so it was never assessed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

CAMERA = "garage"
START = datetime(2026, 12, 2, 2, 40, 5, tzinfo=UTC)
_THINGS = (
    "a red toolbox on the workbench",
    "a mountain bike leaning on the wall",
    "a ladder hanging on hooks",
    "a shelf of paint tins",
    "a lawnmower under a cover",
    "a closed up-and-over door",
    "a chest freezer with a lid",
    "a torch beam on the floor",
)


def region(i: int, n: int) -> dict[str, Any]:
    thing = _THINGS[(i + n) % len(_THINGS)]
    return {
        "label": ["person", "object", "tool", "vehicle"][(i + n) % 4],
        "caption": f"{thing}, partly lit by a torch, region {i} of frame {n}, near the {('door', 'bench')[i % 2]}",
        "bbox": [0.05 + 0.01 * (i % 40), 0.1, 0.5 + 0.01 * (i % 40), 0.9],
    }


def detection_records(n_detections: int = 6, n_regions: int = 64, camera: str = CAMERA) -> list[dict[str, Any]]:
    """Contract records (JSON-ready): persons, each on its own track, each with `n_regions` Florence regions."""
    records = []
    for n in range(n_detections):
        ts = START + timedelta(seconds=4 * n)
        caption = f"a person in a dark hoodie {['crouching by', 'opening', 'looking into', 'standing at'][n % 4]} " + (
            f"the {['workbench', 'tool cabinet', 'freezer', 'bike rack'][n % 4]} with a torch at night"
        )
        records.append(
            {
                "detection_id": f"garage-night-{n:03d}",
                "camera_id": camera,
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                "label": "person",
                "confidence": round(0.62 + 0.04 * n, 2),  # under the fast path: one regular batch
                "bbox": [0.2, 0.1, 0.5, 0.95],
                "track_id": f"trk-{n}",
                "zone": ["workbench", "door", "bikes"][n % 3],
                "enrichment": {
                    "florence": {
                        "caption": caption,
                        "dense_caption": caption + ", tools on the wall behind, the garage door closed",
                        "regions": [region(i, n) for i in range(n_regions)],
                    },
                    "scene": {"description": "a dark garage lit by a torch", "lighting": "night", "indoor": True},
                    "clip": [{"label": "intruder", "score": 0.61}, {"label": "resident", "score": 0.22}],
                    "pose": {"posture": "crouching", "score": 0.8},
                    "clothing": {"description": "dark hoodie, gloves", "suspicious": True},
                    "reid": {"identity": "unknown", "known": False, "score": 0.7, "seen_before": False},
                },
            }
        )
    return records


def batch_and_detections(n_detections: int = 6, n_regions: int = 64) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The batch row and detection rows `core.context.enrichment.build_context` takes."""
    detections = []
    for record in detection_records(n_detections, n_regions):
        detections.append(
            {**record, "ts": datetime.fromisoformat(record["ts"].replace("Z", "+00:00")), "is_late": False}
        )
    last = detections[-1]["ts"]
    batch = {
        "batch_id": f"{CAMERA}:{detections[0]['detection_id']}",
        "camera_id": CAMERA,
        "started_at": detections[0]["ts"],
        "last_ts": last,
        "closes_at": last + timedelta(seconds=30),
        "close_reason": "idle",
        "detection_count": len(detections),
    }
    return batch, detections
