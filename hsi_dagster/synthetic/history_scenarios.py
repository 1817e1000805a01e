"""Labeled scenarios whose right answer depends on the camera's history (issue 25): owned by the history work.

`scenarios.generate_scenarios` appends `HISTORY_CATEGORIES` after the other categories (so adding one renumbers
nothing before it). A category's scene carries `history`: the plain inputs in core/history.py's JSON shape
(`history_inputs_from_json`), from which the evaluation computes `HistoryFacts` with the function production uses.
Days are relative to the batch ("days_ago": "1-14" = each of the 14 days before) and `labels_in_hour` are the
labels seen on that day in the batch's local hour, so a scene's drawn time never disagrees with its history.

The pairs: the same daytime-looking batch (an unknown person at the side gate mid-morning) with and without a
history of that activity at that hour; a path across three cameras (driveway -> garage -> backyard) ending at the
back door at night; a new camera (two days of history) by day, which must not be "unusual" everywhere; a resident,
re-identified, who comes home at 02:00 nearly every night. Cameras are those of hsi_dagster/data/cameras.example.yaml
(Europe/London: UTC in December).
"""

from __future__ import annotations

import random
from typing import Any

from hsi_dagster.synthetic.scenario_kit import Actor, Category, Scene, reading, resident, stranger

_CALM = (0.01, 0.1)
_PATH = {"backyard": ["garage"], "garage": ["driveway"]}


def _days(in_hour: list[str], *, every: int = 14, missing: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """The `every` days before the batch's, each with activity; `in_hour` seen in the batch's hour except on
    `missing` days (which saw other things, a cat at noon say, so they still count as observed)."""
    return [{"days_ago": ago, "labels_in_hour": [] if ago in missing else list(in_hour)} for ago in range(1, every + 1)]


def _side_gate_morning(rng: random.Random, history: dict[str, Any]) -> Scene:
    person = Actor(
        "person",
        (0.82, 0.95),
        rng.randint(3, 5),
        "side_gate",
        ["a person in a grey jacket opens the side gate and walks in", "a person with a bag walks past the shed"],
        clip=[("a person walking in a garden", (0.55, 0.8)), ("a burglar", (0.05, 0.2))],
        pose=["standing", "walking"],
        action=("walking", (0.6, 0.9)),
        clothing=("grey jacket and dark trousers", False),
        violence=_CALM,
        reid=stranger(rng),
        distance_m=(3.0, 7.0),
    )
    start = rng.choice([10.0, 10.5, 11.0])
    scene = Scene("backyard", (start, start + 0.4), [person], "day", "rear garden by day", span_s=(20.0, 45.0))
    scene.history = history
    return scene


def _usual_visitor(rng: random.Random) -> Scene:
    days = _days(["person"], missing=tuple(rng.sample(range(1, 15), 2)))  # 12 of 14 days
    return _side_gate_morning(rng, {"days": days})


def _unusual_visitor(rng: random.Random) -> Scene:
    days = _days([])  # the camera saw 14 days of foxes, dog and gardener, never a person at this hour
    return _side_gate_morning(rng, {"days": days})


def _path_to_back_door(rng: random.Random) -> Scene:
    person = Actor(
        "person",
        (0.7, 0.9),
        rng.randint(3, 5),
        "patio",
        ["a person in a dark jacket walks up to the back door", "a person stands on the patio looking at the house"],
        clip=[("a person standing in a garden at night", (0.5, 0.8)), ("a burglar", (0.2, 0.4))],
        pose=["standing"],
        action=("walking", (0.55, 0.85)),
        clothing=("dark jacket and jeans", False),
        violence=_CALM,
        reid=stranger(rng),
        distance_m=(1.5, 4.0),
    )
    driveway_s = reading(rng, (200.0, 330.0), 0)
    garage_s = reading(rng, (60.0, 150.0), 0)
    history = {
        "days": _days([]),
        "recent": [
            {"camera_id": "driveway", "seconds_before": driveway_s, "labels": ["person"], "risk_level": "low"},
            {"camera_id": "garage", "seconds_before": garage_s, "labels": ["person"], "risk_level": None},
        ],
        "approached_from": _PATH,
        "entry_points": ["backyard", "garage"],
    }
    start = rng.choice([1.5, 2.25, 3.0])
    scene = Scene("backyard", (start, start + 0.5), [person], "night", "rear garden at night, infrared")
    scene.history = history
    return scene


def _new_camera_delivery(rng: random.Random) -> Scene:
    courier = Actor(
        "person",
        (0.86, 0.96),
        rng.randint(3, 4),
        "porch",
        ["a courier in a hi-vis vest puts a parcel in the box by the door", "a delivery driver walks up the path"],
        clip=[("a delivery person", (0.6, 0.85)), ("a burglar", (0.02, 0.12))],
        pose=["standing", "bending"],
        action=("placing a package", (0.6, 0.9)),
        clothing=("hi-vis vest over a dark jacket", False),
        violence=_CALM,
        reid=stranger(rng),
        distance_m=(1.0, 3.0),
    )
    parcel = Actor("suitcase", (0.5, 0.7), 2, "porch", ["a cardboard parcel in the box"], tracked=False)
    start = rng.choice([11.0, 13.5, 15.0])
    scene = Scene(
        "front_door", (start, start + 0.3), [courier, parcel], "day", "porch by day", weekday=rng.randrange(0, 5)
    )
    scene.history = {"days": _days([], every=2)}  # installed two days ago; nobody at this hour yet
    return scene


def _resident_home_2am(rng: random.Random) -> Scene:
    who = rng.choice(["resident:alex", "resident:sam"])
    person = Actor(
        "person",
        (0.82, 0.95),
        rng.randint(3, 4),
        "door",
        ["a person in a work uniform unlocks the front door", "a person with a rucksack walks up the path"],
        clip=[("a person at a door at night", (0.5, 0.8)), ("a burglar", (0.1, 0.3))],
        pose=["standing"],
        action=("unlocking a door", (0.6, 0.85)),
        clothing=("dark work uniform and a rucksack", False),
        violence=_CALM,
        reid=resident(rng, who),
        distance_m=(1.0, 2.5),
    )
    scene = Scene("front_door", (2.0, 2.4), [person], "night", "porch at night, infrared")
    scene.history = {"days": _days(["person"], missing=(rng.randrange(1, 15),))}  # 13 of 14 nights: a night shift
    return scene


HISTORY_CATEGORIES: tuple[Category, ...] = (
    Category(
        "history_usual_visitor",
        2,
        "low",
        (0, 29),
        "An unknown person walks in at the side gate mid-morning; this camera saw a person at this hour on 12 of the "
        "last 14 days (a regular visitor): routine here.",
        _usual_visitor,
    ),
    Category(
        "history_unusual_visitor",
        2,
        "medium",
        (30, 59),
        "The same daytime scene on a camera that saw no person at this hour on any of the last 14 days: an "
        "unexplained stranger at an entry zone.",
        _unusual_visitor,
    ),
    Category(
        "history_path_to_back_door",
        2,
        "high",
        (60, 84),
        "At night a stranger reaches the back door minutes after a person on the driveway and then in the garage: "
        "a path across three cameras towards an entry point.",
        _path_to_back_door,
    ),
    Category(
        "history_new_camera",
        2,
        "low",
        (0, 29),
        "A courier leaves a parcel by day on a camera installed two days ago: too little history to call anything "
        "unusual, and the profile expects deliveries.",
        _new_camera_delivery,
    ),
    Category(
        "history_resident_home_2am",
        2,
        "low",
        (0, 25),
        "A resident, re-identified, comes home at 02:00 as on 13 of the last 14 nights (a night shift): usual.",
        _resident_home_2am,
    ),
)
