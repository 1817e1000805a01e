"""The config check's probe: a representative rich batch on each profiled camera, as the pipeline would see it.

`hsi config check` (cli/config_findings.py) computes the prompt's floor on these contexts. They are built with the
pipeline's own step (hsi_dagster/steps.py `context_for_batch`) and the settings, carry the id batching would give the
batch (the prompt's header shows it) and, with HISTORY_ENABLED, the history facts of a camera with nothing stored yet
(the history sections are then in the prompt, and the floor names them among the sections it removed). So the floor
is the one `budgeted_prompts` hits for the same detections (tests/cli/test_config_floor.py holds them equal).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.history import HistoryFacts, HistoryInputs, HistoryRules, history_facts, profile_timezone
from hsi_dagster.core.intake.batching import DetectionRef, make_batch_id
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import context_for_batch
from hsi_dagster.synthetic.batches import synthetic_batch

# The representative rich batch: 8 detections on 4 tracks (three people and a car), every enrichment type, and as
# many Florence regions per detection as the prompt shows (8).
PROBE_LABELS = ("person", "person", "person", "car")
PROBE_REGIONS = 8


def probe_batch(camera: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The representative rich batch on `camera` (seeded by the camera's name): PROBE_LABELS' tracks, 8 detections
    with every enrichment type and PROBE_REGIONS Florence regions each."""
    batch, detections = synthetic_batch(
        random.Random(f"config-check|{camera}"), camera_id=camera, n_detections=8, track_labels=PROBE_LABELS
    )
    for detection in detections:
        florence = detection["enrichment"]["florence"]
        florence["regions"] = [
            {"label": "object", "caption": f"{florence['caption']}, detail {i}", "bbox": [0.1, 0.1, 0.5, 0.5]}
            for i in range(PROBE_REGIONS)
        ]
    first = detections[0]
    # the id batching gives it (the prompt's header carries the id, so its length counts towards the floor)
    ref = DetectionRef(first["detection_id"], camera, first["ts"], first["label"], first["confidence"])
    return {**batch, "batch_id": make_batch_id(camera, ref)}, detections


def _probe_history(
    batch: dict[str, Any], detections: list[dict[str, Any]], profile: CameraProfile | None, settings: HsiSettings
) -> HistoryFacts | None:
    """With HISTORY_ENABLED, the history facts of a camera with nothing stored yet (core/context/history.py): the
    history sections are in the prompt, so its floor names them among the sections removed; else None."""
    if not settings.HISTORY_ENABLED:
        return None
    rules = HistoryRules.from_settings(settings)
    inputs = HistoryInputs(
        camera_id=str(batch["camera_id"]),
        batch_start=batch["started_at"],
        batch_labels=tuple(sorted({str(d["label"]) for d in detections})),
        timezone=profile_timezone(profile),
        days_requested=rules.days,
    )
    return history_facts(inputs, rules)


def probe_contexts(settings: HsiSettings, profiles: Mapping[str, CameraProfile | None]) -> dict[str, EnrichedContext]:
    """Camera id -> the enriched context of its probe batch, built by the pipeline's step with these settings (the
    configured quality level, noise threshold, fast path, the camera's profile and, with HISTORY_ENABLED, history
    facts)."""
    contexts = {}
    for camera, profile in profiles.items():
        batch, detections = probe_batch(camera)
        history = _probe_history(batch, detections, profile, settings)
        contexts[camera] = context_for_batch(batch, detections, settings, camera_profile=profile, history=history)
    return contexts
