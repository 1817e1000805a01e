"""Which cameras of a site are neighbours, as the household said it: a camera profile's `approached_from` (the
cameras a visitor passes just before this one) and Frigate's camera groups (cameras shown together, usually one side
of the house). core/visits/linking.py links a sighting on a neighbour camera within a longer reach.

Pure code. A Frigate group of more than MAX_GROUP_CAMERAS cameras ("all outdoor cameras") says nothing about who is
next to whom and is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_GROUP_CAMERAS = 4


@dataclass(frozen=True)
class Adjacency:
    """Unordered camera pairs -> the reason they are neighbours ("neighbour a->b", "camera group back")."""

    edges: Mapping[frozenset[str], str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.edges)

    def reason(self, a: str, b: str) -> str | None:
        """Why cameras a and b are neighbours, None when they are not known to be (or are the same camera)."""
        if a == b:
            return None
        return self.edges.get(frozenset((a, b)))

    @classmethod
    def of(
        cls,
        approached_from: Mapping[str, Iterable[str]] | None = None,
        camera_groups: Mapping[str, Iterable[str]] | None = None,
    ) -> Adjacency:
        """From the profiles' `approached_from` (camera -> cameras before it) and Frigate's camera groups (name ->
        cameras); a profile's neighbour wins over a group for the same pair (it says the direction)."""
        edges: dict[frozenset[str], str] = {}
        for name, cameras in sorted((camera_groups or {}).items()):
            members = sorted(set(cameras))
            if len(members) > MAX_GROUP_CAMERAS:
                continue
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    edges.setdefault(frozenset((a, b)), f"camera group {name}")
        for camera, before in sorted((approached_from or {}).items()):
            for earlier in before:
                if earlier != camera:
                    edges[frozenset((earlier, camera))] = f"neighbour {earlier}->{camera}"
        return cls(edges)
