"""A labeled scenario's detections cut down to what a Frigate household sends (`hsi eval --inputs frigate`).

The project's set is written with every vision model's output; a household running Frigate has none of them. Kept
is what the Frigate mapping (core/frigate/mapping.py, identity.py) can put on a detection:
- the detector's own record: label (its labelmap: person, car, dog, knife, ...), confidence, box, track, zone;
- `reid` only when it is a recognition (`known` true: a face of Frigate's face library or a known plate), without
  `seen_before` (Frigate does not say a stranger was seen before);
- `vehicle.plate` (Frigate's licence-plate recognition), nothing else of `vehicle` (no type, colour, damage);
- `florence.caption`, standing for Frigate's GenAI description of the tracked object (no dense caption or regions).
Dropped: `scene` (so "dark" comes from the local hour), `clip`, `pose`, `action`, `pet`, `weather`, `clothing`,
`violence`, `depth`, and `reid` of anyone not recognised. Pure: the scenario itself is not changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

INPUTS = ("enriched", "frigate")  # `hsi eval --inputs`: the set as written, or only what Frigate gives


def frigate_enrichment(enrichment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of a detection's enrichment a Frigate install provides (module docstring)."""
    if not isinstance(enrichment, Mapping):
        return {}
    out: dict[str, Any] = {}
    reid = enrichment.get("reid")
    if isinstance(reid, Mapping) and reid.get("known") is True:
        out["reid"] = {key: reid[key] for key in ("identity", "known", "score") if key in reid}
    vehicle = enrichment.get("vehicle")
    if isinstance(vehicle, Mapping) and vehicle.get("plate"):
        out["vehicle"] = {"plate": vehicle["plate"]}
    florence = enrichment.get("florence")
    if isinstance(florence, Mapping) and florence.get("caption"):
        out["florence"] = {"caption": florence["caption"]}
    return out


def frigate_like(detections: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The detections as Frigate would have sent them: the detector's fields as they are, `frigate_enrichment`."""
    return [{**detection, "enrichment": frigate_enrichment(detection.get("enrichment"))} for detection in detections]
