"""A batch's pattern: what makes two batches of a camera "similar" for the household's corrections. Pure code.

Structured, closed-vocabulary facts only, never caption text: the camera, the detector labels, the zones, the
local two-hour band and the identities a recogniser produced (a re-identified name with `known: true`, a plate read
by LPR). The household exceptions (core/verdict/exceptions.py) group corrected batches by it; the prompt's worked
examples (core/context/household_examples.py) rank corrected batches by how much of it they share.
"""

from __future__ import annotations

from dataclasses import dataclass

from hsi_dagster.core.context.context_models import EnrichedContext

HOUR_BAND_HOURS = 2


@dataclass(frozen=True)
class Pattern:
    """What makes two corrected batches "similar" (see the module docstring)."""

    camera_id: str
    labels: tuple[str, ...]
    zones: tuple[str, ...]
    hour_band: int  # the first local hour of the band (0, 2, ..., 22)
    identities: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        parts = (
            self.camera_id,
            ",".join(self.labels),
            ",".join(self.zones),
            str(self.hour_band),
            ",".join(self.identities),
        )
        return "|".join(parts)

    def describe(self) -> str:
        who = f", identity {', '.join(self.identities)}" if self.identities else ""
        zones = ", ".join(self.zones) or "no zone"
        band = f"{self.hour_band:02d}-{self.hour_band + HOUR_BAND_HOURS:02d}h"
        return f"{self.camera_id}: {', '.join(self.labels) or 'nothing'} on {zones}, {band}{who}"


def local_hour(context: EnrichedContext) -> int:
    """The batch's local start hour (the context's `local_start`, in the camera's zone; UTC start otherwise)."""
    local = context.detections.local_start
    if local and len(local) >= 13 and local[11:13].isdigit():
        return int(local[11:13])
    return (context.detections.first_ts or context.batch.started_at).hour


def batch_pattern(context: EnrichedContext) -> Pattern:
    identities = {
        str(obs.fields["identity"])
        for obs in context.observations.get("reid", [])
        if obs.fields.get("known") is True and obs.fields.get("identity")
    }
    identities |= {plate for track in context.detections.tracks for plate in track.plates}
    return Pattern(
        camera_id=context.batch.camera_id,
        labels=tuple(sorted(context.detections.by_label)),
        zones=tuple(sorted(context.detections.zones)),
        hour_band=local_hour(context) // HOUR_BAND_HOURS * HOUR_BAND_HOURS,
        identities=tuple(sorted(identities)),
    )
