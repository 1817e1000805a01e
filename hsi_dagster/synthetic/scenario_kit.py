"""What a labeled scene is made of: actors, the scene, and the seeded draws they share.

`scenario_specs.py` builds scenes from the data in `hsi_dagster/data/scenario_specs.toml`; `scenarios.py` renders a
scene into contract-shaped detections with the same seeded random generator.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Actor:
    """One tracked object: its per-frame enrichment is built from these fields."""

    label: str
    conf: tuple[float, float]
    frames: int
    zone: str
    captions: Sequence[str]
    clip: Sequence[tuple[str, tuple[float, float]]] = ()
    regions: Sequence[tuple[str, str]] = ()
    pose: Sequence[str] = ()
    action: tuple[str, tuple[float, float]] | None = None
    clothing: tuple[str, bool] | None = None
    violence: tuple[float, float] | None = None
    reid: dict[str, Any] | None = None
    vehicle: dict[str, Any] | None = None
    pet: str | None = None
    distance_m: tuple[float, float] = (2.0, 8.0)
    tracked: bool = True
    violence_frames: Sequence[float] = ()  # per-frame scores (one spike in a calm track), instead of `violence`


@dataclass
class Scene:
    camera: str
    hours: tuple[float, float]  # local start time, hours after midnight (may pass 24)
    actors: list[Actor]
    lighting: str
    description: str
    weather: dict[str, Any] = field(default_factory=lambda: {"condition": "clear", "visibility": "good"})
    weekday: int | None = None  # 0 = Monday, when the label depends on the day (a gardener's hours)
    span_s: tuple[float, float] = (20.0, 80.0)
    date: tuple[int, int, int] | None = None  # a fixed day (Halloween) instead of a random December day
    history: dict[str, Any] | None = None  # the plain history inputs (core/context/history.py's JSON shape), when any


def reading(rng: random.Random, bounds: tuple[float, float], digits: int = 3) -> float:
    return round(rng.uniform(*bounds), digits)


def stranger(rng: random.Random) -> dict[str, Any]:
    return {"identity": "unknown", "known": False, "seen_before": False, "score": reading(rng, (0.2, 0.45), 2)}


def resident(rng: random.Random, who: str) -> dict[str, Any]:
    return {"identity": who, "known": True, "seen_before": True, "score": reading(rng, (0.82, 0.97), 2)}


def night(rng: random.Random) -> tuple[float, float]:
    start = rng.choice([23.0, 0.0, 1.0, 2.0, 3.0])
    return (start, start + 1.5)
