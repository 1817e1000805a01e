"""What the evidence floor (core/verdict/evidence.py) can and cannot raise at a camera, given its profile (or none),
the zones its detector reports (Frigate's zones of that camera, when known) and whether a vision gateway sends action
and violence readings: what `hsi config check` tells a household about each camera before a night goes unwatched.

Rules that need nothing of a profile: weapon, tool with a stranger, after an alert on another camera; violence,
forcing, probing and watching need an action or violence model's readings (Frigate sends none: a vision gateway,
ENRICHMENT_BACKEND=http, can). Rules that need a profile's entry or private zones: person and vehicle at night,
loitering, unusual here, forcing at an entry (critical; elsewhere it stops at high); a profile's `approached_from`:
path to entry; its time zone: the night hours (UTC without one). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.verdict.evidence import CRITICAL, FORCING_ELSEWHERE, HIGH, MEDIUM
from hsi_dagster.core.verdict.watched_zones import watched_zones

ALWAYS = (
    f"a weapon (knife, gun) tracked on 2+ detections ({CRITICAL} critical)",
    f"a tool (crowbar, bat...) with a person not known ({HIGH} high)",
    f"a person not known after another camera was high or critical ({HIGH} high, with history on)",
)
MODEL_RULES = (
    f"violence ({CRITICAL})",
    f"forcing ({FORCING_ELSEWHERE} high away from an entry zone)",
    f"probing: handles, windows, parcels ({HIGH})",
    f"watching: photographing the house ({MEDIUM})",
)
ZONE_RULES = (
    f"a person not known at night on an entry or private zone ({HIGH} high)",
    f"a vehicle or object at night there ({MEDIUM} medium)",
    f"loitering there in the dark ({MEDIUM})",
    f"a person unusual at this hour there ({MEDIUM})",
    f"forcing at an entry zone ({CRITICAL} critical; it stops at {FORCING_ELSEWHERE})",
)
PATH_RULE = f"a path of cameras ending here (approached_from: {MEDIUM}, {HIGH} at night)"


def _guessed_zones(zones: Sequence[str] | None) -> str:
    """What the floor watches at a camera without a profile (core/verdict/watched_zones.py), for its owner."""
    guessed = watched_zones(None, zones or ())
    roles = [
        f"{role} {', '.join(sorted(names))}"
        for role, names in (("entry", guessed.entry), ("private", guessed.private), ("public", guessed.public))
        if names
    ]
    placed = f" (from the zone names: {'; '.join(roles)})" if roles else ""
    return (
        f"the zone rules on entry and private zones guessed from their names{placed}; a person not known at night on "
        f"no such zone ({MEDIUM} medium: where on the property is not known)"
    )


@dataclass(frozen=True)
class Coverage:
    camera_id: str
    detects: tuple[str, ...]  # what the floor still raises here
    misses: tuple[str, ...]  # what it never raises here, and why
    advice: str  # what to do about it

    def message(self) -> str:
        return (
            f"camera {self.camera_id!r}: the floor still raises {'; '.join(self.detects)}; it never raises "
            f"{'; '.join(self.misses)}. {self.advice}"
        )


def camera_coverage(
    camera_id: str,
    profile: CameraProfile | None,
    detector_zones: Sequence[str] | None,
    *,
    vision_models: bool,
) -> Coverage | None:
    """What the floor raises and misses at `camera_id`; None when its profile names watched zones the detector
    reports (nothing is missing). `detector_zones` None: the detector's zones are not known."""
    detects = list(ALWAYS)
    misses: list[str] = []
    if vision_models:
        detects.append("with the gateway's action and violence readings: " + ", ".join(MODEL_RULES))
    else:
        misses.append(
            ", ".join(MODEL_RULES) + " (they need an action or violence model's readings: Frigate sends none; a "
            "vision gateway, ENRICHMENT_BACKEND=http, can)"
        )
    zones = list(detector_zones) if detector_zones is not None else None
    if zones == []:
        advice = "It has no zones in Frigate: draw its door, gate or drive there first, then give it a profile."
    else:
        advice = (
            "`hsi frigate profiles --out cameras.yaml` proposes a profile from Frigate's zones"
            + (f" ({', '.join(zones)})" if zones else "")
            + "; edit it and set CAMERA_CONTEXT_PATH."
        )
    if profile is None:
        detects.append(_guessed_zones(zones))
        misses.append(
            "; ".join(ZONE_RULES) + " on a zone whose name places it nowhere (no profile: roles come from the names)"
        )
        misses.append(f"{PATH_RULE}; the night hours are read in UTC (no profile time zone)")
        return Coverage(camera_id, tuple(detects), tuple(misses), advice)
    watched = [*profile.entry_zones, *profile.private_zones]
    unreported = [zone for zone in watched if zones is not None and zone not in zones]
    if watched and not unreported:
        return None
    if not watched:
        misses.append("; ".join(ZONE_RULES) + " (its profile names no entry_zones or private_zones)")
        advice = "Name its entry and private zones in its profile" + (
            f" (Frigate's zones here: {', '.join(zones)})." if zones else "."
        )
    else:
        misses.append(
            f"anything on {', '.join(repr(z) for z in unreported)}: its profile watches zone(s) Frigate does not "
            "have at this camera (never reported)"
        )
        advice = f"Rename them to Frigate's zones of this camera: {', '.join(zones or []) or 'none'}."
    return Coverage(camera_id, tuple(detects), tuple(misses), advice)
