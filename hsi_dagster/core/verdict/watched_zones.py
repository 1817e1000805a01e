"""Which zones the evidence floor watches at a camera: its profile's entry and private zones, or, on a camera without
a profile, each zone's role guessed from its name.

A new Frigate user has cameras and zones but no profiles; before this default the zone rules (a stranger at the door
at night, loitering) never fired there, so an intruder at `back_door` at 03:10 was stored low. Without a profile the
floor now places the zones it sees the way `hsi frigate profiles` would propose them (core/frigate/profiles.py:
`front_door` entry, `driveway` private, `sidewalk` public, `zone_1` not placed). A person not known at night whom no
zone places (no zones at all, or only unplaced names) is medium: the camera watches the property, where on it is not
known, and a missed intruder costs more than a question; never high, since the view may reach the street. A profile,
once written, decides alone (its zones are the household's word). `hsi config check` says this per camera
(core/verdict/coverage.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.frigate.profiles import classify_zone


@dataclass(frozen=True)
class WatchedZones:
    entry: frozenset[str]
    private: frozenset[str]
    public: frozenset[str]
    guessed: bool  # no profile: the roles come from the zone names

    def watched(self, zones: Iterable[str]) -> list[str]:
        """The entry zones among `zones`, then the private ones (sorted: the first names the reason)."""
        zones = set(zones)
        return sorted(zones & self.entry) + sorted(zones & self.private)

    def unplaced(self, zones: Iterable[str]) -> bool:
        """Without a profile: no zone of `zones` has a role (none at all, or only names no word places)."""
        return self.guessed and not set(zones) & (self.entry | self.private | self.public)

    def basis(self) -> str:
        return "zone role guessed from its name: the camera has no profile" if self.guessed else "profile"


def watched_zones(profile: CameraProfile | None, seen: Iterable[str]) -> WatchedZones:
    """The profile's zones; without one, the roles of the zones `seen` in the batch, guessed from their names."""
    if profile is not None:
        return WatchedZones(frozenset(profile.entry_zones), frozenset(profile.private_zones), frozenset(), False)
    roles: dict[str, set[str]] = {"entry": set(), "private": set(), "public": set()}
    for zone in set(seen):
        role = classify_zone(zone).role
        if role is not None:
            roles[role].add(zone)
    return WatchedZones(
        frozenset(roles["entry"]), frozenset(roles["private"]), frozenset(roles["public"]), guessed=True
    )
