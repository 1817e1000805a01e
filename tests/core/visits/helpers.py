"""Sightings and contexts for the visit tests: a batch's detections through the real build_context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.visits.sighting import Sighting

LONDON_NIGHT = datetime(2026, 12, 2, 2, 30, tzinfo=UTC)  # 02:30 in London (UTC in December)
STRANGER = {"reid": {"identity": "unknown", "known": False, "score": 0.3}}


def resident(name: str) -> dict[str, Any]:
    return {"reid": {"identity": f"resident:{name}", "known": True, "score": 0.95}}


def context_of(
    camera: str,
    start: datetime,
    *,
    label: str = "person",
    zone: str = "pavement",
    track: str = "t1",
    frames: int = 4,
    step_s: float = 5.0,
    confidence: float = 0.9,
    profile: CameraProfile | None = None,
    enrichment: dict[str, Any] | None = None,
    batch_id: str | None = None,
    walk: float = 0.0,
) -> EnrichedContext:
    """`walk`: how far the box moves across the frame over the frames (0: standing still)."""
    detections = [
        {
            "detection_id": f"{camera}-{track}-{n}",
            "ts": (start + timedelta(seconds=n * step_s)).isoformat(),
            "label": label,
            "confidence": confidence,
            "bbox": [0.1 + walk * n / max(1, frames - 1), 0.2, 0.3 + walk * n / max(1, frames - 1), 0.9],
            "zone": zone,
            "track_id": track,
            "enrichment": enrichment or {},
        }
        for n in range(frames)
    ]
    batch = {
        "batch_id": batch_id or f"{camera}-{start:%H%M}",
        "camera_id": camera,
        "started_at": detections[0]["ts"],
        "last_ts": detections[-1]["ts"],
    }
    return build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2, camera_profile=profile)


def sighting(
    camera: str,
    start: datetime,
    *,
    seconds: float = 20,
    unknown: int = 1,
    known: tuple[str, ...] = (),
    identities: tuple[str, ...] = (),
    plates: tuple[str, ...] = (),
    entry: tuple[str, ...] = (),
    batch_id: str | None = None,
    hour: int | None = None,
) -> Sighting:
    return Sighting(
        batch_id=batch_id or f"{camera}-{start:%H%M%S}",
        camera_id=camera,
        start=start,
        end=start + timedelta(seconds=seconds),
        local_time=f"{start:%H:%M}",
        local_hour=start.hour if hour is None else hour,
        timezone="UTC",
        unknown_people=unknown,
        known_people=len(known),
        vehicles=0,
        known_identities=known,
        identities=tuple(sorted({*identities, *known})),
        plates=plates,
        entry_zones=entry,
        longest_still_s=seconds,
        still_zone="pavement",
    )
