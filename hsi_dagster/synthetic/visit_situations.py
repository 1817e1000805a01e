"""The cross-camera labeled set (`hsi eval --set visits`): situations of one household, each a few batches on 2-4
cameras minutes apart, labeled per batch the way the household would judge what it saw so far.

Written from situations, not from the rules (issue 44, item 5): harmless ones a household sees every week (the
postman's round, a resident coming home at 01:00, two people passing at once, a dog walker at 22:00, a fox across
the garden, a driver back with a second parcel) and threats (the issue's casing visit, car doors tried then the back
garden, a second visit the same night, a caller who goes round the back by day). Each label's reason is the
household's sentence. Every situation is on the holdout split: nothing here is tuned on.

The cameras are those of `hsi_dagster/data/visit_cameras.yaml`: time zone and zones only, no camera graph. The set is
plain data, rendered deterministically into the project set's scenario format (synthetic/scenarios.py), one
`Scenario` per batch (`<situation>.b<n>`) with `situation` grouping a situation's batches; STORED in
`hsi_dagster/data/eval_visits.jsonl` (a test checks it equals `generate_visit_scenarios()`). Regenerate with
`python -m hsi_dagster.synthetic.visit_situations --write`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile, parse_camera_profiles
from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS
from hsi_dagster.synthetic.scenarios import Scenario, scenarios_jsonl

VISITS_PATH = Path(__file__).resolve().parents[1] / "data" / "eval_visits.jsonl"
VISIT_CAMERAS_PATH = Path(__file__).resolve().parents[1] / "data" / "visit_cameras.yaml"
THREAT, HARMLESS = "threat", "harmless"
FRAME_S = 5.0  # one detection every 5 s per figure: a 20 s look is five detections
STRANGER = {"identity": "unknown", "known": False, "seen_before": False, "score": 0.31}
BANDS = {level: (low, high) for level, low, high in LEVEL_BANDS}


def resident(name: str) -> dict[str, Any]:
    return {"identity": f"resident:{name}", "known": True, "seen_before": True, "score": 0.93}


@dataclass(frozen=True)
class Figure:
    """One tracked person, animal or vehicle in a look."""

    label: str
    zone: str
    caption: str
    reid: dict[str, Any] | None = None
    action: str = "walking"
    clothing: tuple[str, bool] | None = None
    vehicle: dict[str, Any] | None = None


@dataclass(frozen=True)
class Look:
    """One batch: a camera at a local time (Europe/London = UTC in December), the household's level and why."""

    camera: str
    at: str  # "HH:MM:SS"
    level: str
    reason: str
    figures: tuple[Figure, ...]
    seconds: int = 20
    day_offset: int = 0  # a look after midnight of a situation that began the evening before


@dataclass(frozen=True)
class Situation:
    situation_id: str
    kind: str  # THREAT or HARMLESS
    day: tuple[int, int, int]
    lighting: str  # "day", "dusk" or "night"
    looks: tuple[Look, ...]

    @property
    def expected_level(self) -> str:
        """The household's level of the situation: the highest of its looks."""
        order = [level for level, _, _ in LEVEL_BANDS]
        return max((look.level for look in self.looks), key=order.index)


def _person(zone: str, caption: str, reid: dict[str, Any] | None = None, **kw: Any) -> Figure:
    return Figure("person", zone, caption, reid if reid is not None else STRANGER, **kw)


HOOD = ("dark hooded top, hood up", True)

SITUATIONS: tuple[Situation, ...] = (
    # ------------------------------------------------------------------------------------------------ harmless
    Situation(
        "postman_round",
        HARMLESS,
        (2026, 12, 8),
        "day",
        (
            Look(
                "front_door",
                "10:40:00",
                "low",
                "The postman putting letters through our door, like every weekday.",
                (
                    _person(
                        "porch",
                        "a postal worker in a red jacket pushes letters through the door",
                        action="delivering mail",
                    ),
                ),
            ),
            Look(
                "driveway",
                "10:41:10",
                "low",
                "Just the postman walking on to next door.",
                (_person("sidewalk", "a postal worker with a bag walks along the pavement"),),
            ),
            Look(
                "side_gate",
                "10:43:00",
                "low",
                "The postman cutting down the alley to the houses at the back, he always does.",
                (_person("alley", "a postal worker walks along the alley with letters in hand"),),
            ),
        ),
    ),
    Situation(
        "resident_home_late",
        HARMLESS,
        (2026, 12, 9),
        "night",
        (
            Look(
                "driveway",
                "01:04:00",
                "low",
                "That's Alex parking the car after the late shift.",
                (
                    Figure(
                        "car",
                        "driveway",
                        "a white SUV parks on the driveway",
                        None,
                        action="parking",
                        vehicle={"type": "suv", "color": "white", "plate": "LR19 XKT", "damage": "none"},
                    ),
                    _person("driveway", "a person gets out of the car and locks it", resident("alex")),
                ),
            ),
            Look(
                "front_door",
                "01:05:00",
                "low",
                "Alex letting themselves in at the front door.",
                (
                    _person(
                        "porch", "a person unlocks the front door with a key", resident("alex"), action="opening a door"
                    ),
                ),
            ),
        ),
    ),
    Situation(
        "two_passers_by",
        HARMLESS,
        (2026, 12, 10),
        "night",
        (
            Look(
                "front_door",
                "23:20:00",
                "low",
                "A man walking home along the street past the house.",
                (_person("street", "a man in a parka walks along the pavement past the house"),),
            ),
            Look(
                "driveway",
                "23:20:10",
                "low",
                "A woman walking the other way on the pavement at the same moment: two people going home.",
                (_person("sidewalk", "a woman with a shoulder bag walks along the pavement"),),
            ),
        ),
    ),
    Situation(
        "dog_walker",
        HARMLESS,
        (2026, 12, 11),
        "night",
        (
            Look(
                "front_door",
                "22:00:00",
                "low",
                "The neighbour walking the dog past, every night about ten.",
                (
                    _person("street", "a person walks a dog on a lead along the pavement"),
                    Figure("dog", "street", "a dog on a lead sniffs the kerb"),
                ),
            ),
            Look(
                "driveway",
                "22:01:00",
                "low",
                "Still the neighbour and the dog, walking on.",
                (
                    _person("sidewalk", "a person walks a dog on a lead along the pavement"),
                    Figure("dog", "sidewalk", "a dog on a lead"),
                ),
            ),
            Look(
                "side_gate",
                "22:03:00",
                "low",
                "Neighbour and dog going home down the alley.",
                (
                    _person("alley", "a person with a dog on a lead walks along the alley"),
                    Figure("dog", "alley", "a dog on a lead"),
                ),
            ),
        ),
    ),
    Situation(
        "fox_across_garden",
        HARMLESS,
        (2026, 12, 12),
        "night",
        (
            Look(
                "driveway",
                "02:10:00",
                "low",
                "A fox trotting up the drive.",
                (Figure("fox", "driveway", "a fox trots across the driveway"),),
            ),
            Look(
                "backyard",
                "02:11:00",
                "low",
                "The fox crossing the lawn, they come every night.",
                (Figure("fox", "lawn", "a fox crosses the lawn"),),
            ),
            Look(
                "side_gate",
                "02:12:30",
                "low",
                "And the fox out under the gate.",
                (Figure("fox", "gate", "a fox squeezes under the gate"),),
            ),
        ),
    ),
    Situation(
        "driver_second_parcel",
        HARMLESS,
        (2026, 12, 14),
        "dusk",
        (
            Look(
                "driveway",
                "19:38:00",
                "low",
                "A delivery van pulling up outside.",
                (
                    Figure(
                        "truck",
                        "sidewalk",
                        "a white delivery van stops at the kerb",
                        None,
                        action="parking",
                        vehicle={"type": "van", "color": "white", "damage": "none"},
                    ),
                ),
            ),
            Look(
                "front_door",
                "19:39:00",
                "low",
                "The driver leaving our parcel on the step.",
                (_person("porch", "a delivery driver leaves a parcel at the door", action="placing a package"),),
            ),
            Look(
                "front_door",
                "19:44:00",
                "low",
                "Same driver back with the second parcel he forgot.",
                (_person("porch", "a delivery driver leaves a second parcel at the door", action="placing a package"),),
            ),
        ),
    ),
    # ------------------------------------------------------------------------------------------------ threats
    Situation(
        "casing_visit",
        THREAT,
        (2026, 12, 15),
        "night",
        (
            Look(
                "front_door",
                "02:30:00",
                "medium",
                "Someone in a hood standing on the pavement at half two staring at our windows and front door.",
                (
                    _person(
                        "street",
                        "a person in a dark hooded top stands on the pavement looking at the windows and the door",
                        action="standing",
                        clothing=HOOD,
                    ),
                ),
            ),
            Look(
                "driveway",
                "02:32:00",
                "medium",
                "The same hooded person now by the drive, looking at our car and up at the house.",
                (
                    _person(
                        "sidewalk",
                        "a person in a dark hooded top stands on the pavement looking at the parked car and the house",
                        action="standing",
                        clothing=HOOD,
                    ),
                ),
            ),
            Look(
                "side_gate",
                "02:35:00",
                "high",
                "Now he's in the alley looking over our side gate at the back: he's working out how to get in.",
                (
                    _person(
                        "alley",
                        "a person in a dark hooded top stands in the alley looking over the gate",
                        action="standing",
                        clothing=HOOD,
                    ),
                ),
            ),
        ),
    ),
    Situation(
        "car_doors_then_garden",
        THREAT,
        (2026, 12, 16),
        "night",
        (
            Look(
                "driveway",
                "03:00:00",
                "high",
                "Someone trying our car doors at three in the morning.",
                (
                    _person(
                        "parked_car",
                        "a person pulls at the door handle of the parked car",
                        action="trying the car door",
                        clothing=HOOD,
                    ),
                ),
            ),
            Look(
                "backyard",
                "03:02:00",
                "high",
                "And now the same person is in our back garden.",
                (_person("lawn", "a person walks across the lawn towards the house", clothing=HOOD),),
            ),
        ),
    ),
    Situation(
        "second_visit_tonight",
        THREAT,
        (2026, 12, 17),
        "night",
        (
            Look(
                "front_door",
                "00:50:00",
                "medium",
                "A stranger dawdling past after midnight, peering at the houses.",
                (_person("street", "a person walks slowly along the pavement looking at the houses"),),
                seconds=30,
            ),
            Look(
                "driveway",
                "00:52:00",
                "medium",
                "Same stranger slowing down by our drive to look at the car.",
                (_person("sidewalk", "a person stops on the pavement and looks at the parked car", action="standing"),),
                seconds=30,
            ),
            Look(
                "driveway",
                "03:40:00",
                "high",
                "Someone back at our car at twenty to four, hours after the first time: they're coming back for it.",
                (_person("sidewalk", "a person stands on the pavement looking at the parked car", action="standing"),),
                seconds=30,
            ),
        ),
    ),
    Situation(
        "caller_round_the_back",
        THREAT,
        (2026, 12, 18),
        "day",
        (
            Look(
                "front_door",
                "11:15:00",
                "low",
                "A man in hi-vis rang the bell; nobody was in.",
                (
                    _person(
                        "porch",
                        "a man in a high-visibility jacket rings the doorbell and waits",
                        action="ringing the doorbell",
                        clothing=("high-visibility jacket", False),
                    ),
                ),
            ),
            Look(
                "side_gate",
                "11:17:00",
                "high",
                "Then he let himself through our side gate when nobody answered.",
                (
                    _person(
                        "gate",
                        "a man in a high-visibility jacket opens the side gate and walks through",
                        action="opening a gate",
                        clothing=("high-visibility jacket", False),
                    ),
                ),
            ),
            Look(
                "backyard",
                "11:18:00",
                "high",
                "He's at our back door looking in: nobody asked him round there.",
                (
                    _person(
                        "patio",
                        "a man in a high-visibility jacket looks through the back door window",
                        action="looking through a window",
                        clothing=("high-visibility jacket", False),
                    ),
                ),
            ),
        ),
    ),
)


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _enrichment(situation: Situation, figure: Figure, frame: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "florence": {"caption": figure.caption, "dense_caption": figure.caption, "regions": []},
        "scene": {"description": f"{situation.lighting} view", "lighting": situation.lighting, "indoor": False},
        "weather": {"condition": "clear", "visibility": "good"},
        "depth": {"distance_m": round(6.0 - 0.4 * frame, 1)},
        "action": {"label": figure.action, "score": 0.8},
    }
    if figure.reid is not None:
        out["reid"] = dict(figure.reid)
    if figure.clothing is not None:
        out["clothing"] = {"description": figure.clothing[0], "suspicious": figure.clothing[1]}
    if figure.vehicle is not None:
        out["vehicle"] = dict(figure.vehicle)
    if figure.label in ("dog", "fox", "cat"):
        out["pet"] = {"species": figure.label, "score": 0.86}
    return out


def _box(figure: Figure, frame: int, frames: int) -> list[float]:
    """A walker crosses the view (its box moves 0.6 of the frame over the look); anyone else stays put."""
    shift = 0.6 * frame / (frames - 1) if figure.action == "walking" else 0.0
    return [round(0.05 + shift, 3), 0.2, round(0.3 + shift, 3), 0.9]


def _render(situation: Situation, look: Look, scenario_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    hour, minute, second = (int(part) for part in look.at.split(":"))
    start = datetime(*situation.day, hour, minute, second, tzinfo=UTC) + timedelta(days=look.day_offset)
    frames = max(2, int(look.seconds // FRAME_S) + 1)
    detections: list[dict[str, Any]] = []
    for frame in range(frames):
        for number, figure in enumerate(look.figures):
            ts = start + timedelta(seconds=frame * FRAME_S + number * 0.4)
            detections.append(
                {
                    "detection_id": f"{scenario_id}-{len(detections):03d}",
                    "camera_id": look.camera,
                    "ts": _iso(ts),
                    "label": figure.label,
                    "confidence": round(0.82 + 0.03 * (frame % 3), 2),
                    "bbox": _box(figure, frame, frames),
                    "zone": figure.zone,
                    "enrichment": _enrichment(situation, figure, frame),
                    "track_id": f"{scenario_id}-t{number}",
                }
            )
    last = start + timedelta(seconds=(frames - 1) * FRAME_S + (len(look.figures) - 1) * 0.4)
    closes = min(start + timedelta(seconds=90), last + timedelta(seconds=30))
    batch = {
        "batch_id": f"eval:{scenario_id}",
        "camera_id": look.camera,
        "started_at": detections[0]["ts"],
        "last_ts": detections[-1]["ts"],
        "closes_at": _iso(closes),
        "close_reason": "idle" if closes < start + timedelta(seconds=90) else "window",
        "detection_count": len(detections),
    }
    return batch, detections


def generate_visit_scenarios(situations: tuple[Situation, ...] = SITUATIONS) -> list[Scenario]:
    """One Scenario per look, in situation order then time order; all on the holdout split."""
    scenarios = []
    for situation in situations:
        for number, look in enumerate(situation.looks, start=1):
            scenario_id = f"{situation.situation_id}.b{number}"
            batch, detections = _render(situation, look, scenario_id)
            scenarios.append(
                Scenario(
                    scenario_id=scenario_id,
                    category=f"{situation.kind}:{situation.situation_id}",
                    expected_level=look.level,
                    score_band=BANDS[look.level],
                    reason=look.reason,
                    adversarial=False,
                    camera_id=look.camera,
                    batch=batch,
                    detections=detections,
                    split="holdout",
                    situation=situation.situation_id,
                )
            )
    return scenarios


def visit_profiles() -> dict[str, CameraProfile]:
    """The set's camera profiles: zones and time zone, no camera graph."""
    text = VISIT_CAMERAS_PATH.read_text(encoding="utf-8")
    return parse_camera_profiles(text, source=str(VISIT_CAMERAS_PATH))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the cross-camera labeled set (stored in the repo).")
    parser.add_argument("--write", action="store_true", help=f"write {VISITS_PATH}")
    args = parser.parse_args(argv)
    text = scenarios_jsonl(generate_visit_scenarios())
    if args.write:
        VISITS_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {text.count(chr(10))} batches of {len(SITUATIONS)} situations to {VISITS_PATH}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
