"""A labeled scenario set for judging models and server configurations (`hsi eval`, the `evaluation` asset).

Each scenario is one batch window of contract-shaped detections (section 1, with enrichment payloads) and a label:
the risk level a careful analyst would give, the score band that is acceptable, and a one-line reason. The set
mirrors a real home: most events are routine and low (deliveries, residents, pets and wildlife, passing cars,
weather false alarms), a few are unexplained (medium), and the ones that matter are high or critical (door handles
at night, a vehicle break-in, a loiterer photographing the house, someone at a window, a masked person with a
tool, forced entry, a weapon). Adversarial scenarios carry a caption that tries to talk the model into a verdict
(`adversarial: true`): the label follows the evidence, never the caption.

The scenarios are data: each category (camera, time, actors, captions, label, reason) is a table in
`hsi_dagster/data/scenario_specs.toml`, drawn into scenes by `scenario_specs.py`; this module renders the scenes
into detections and batches, and reads, selects and writes the set.

The cameras and what is normal at each are those of `hsi_dagster/data/cameras.example.yaml` (Europe/London: in
December local time is UTC). The set is generated from one `random.Random(seed)` and STORED in
`hsi_dagster/data/eval_scenarios.jsonl`; a test checks the stored file equals `generate_scenarios()`, so the
labels are versioned and any change to them shows in a diff. Regenerate with
`python -m hsi_dagster.synthetic.scenarios --write`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile, parse_camera_profiles
from hsi_dagster.synthetic.scenario_kit import Actor, Scene, reading
from hsi_dagster.synthetic.scenario_specs import HOLDOUT_ONLY_GROUP, load_categories

SCENARIO_SEED = 2026
SCENARIOS_PATH = Path(__file__).resolve().parents[1] / "data" / "eval_scenarios.jsonl"
# The camera profiles the labels were written against (what is normal at each camera).
SCENARIO_CAMERAS_PATH = Path(__file__).resolve().parents[1] / "data" / "cameras.example.yaml"
LEVELS = ("low", "medium", "high", "critical")
SPLITS = ("tune", "holdout")


@dataclass(frozen=True)
class Scenario:
    """One labeled batch. `batch` and `detections` are what `core.context.enrichment.build_context` takes."""

    scenario_id: str
    category: str
    expected_level: str
    score_band: tuple[int, int]
    reason: str
    adversarial: bool
    camera_id: str
    batch: dict[str, Any]
    detections: list[dict[str, Any]]
    split: str = "holdout"  # "tune" (rules and thresholds are tuned on it) or "holdout" (reported, never tuned on)
    history: dict[str, Any] | None = (
        None  # plain history inputs (core/context/history.py's JSON shape), when the label needs it
    )
    # Frigate review items covering the batch (storage.frigate.reviews_covering rows; the Frigate-shaped set only,
    # never written to the JSON Lines file)
    reviews: tuple[dict[str, Any], ...] = ()
    # The batches of one situation (the cross-camera set, synthetic/visit_situations.py): one site's timeline, judged
    # in time order and linked into visits; None: the batch stands alone.
    situation: str | None = None

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "scenario_id": self.scenario_id,
            "category": self.category,
            "expected_level": self.expected_level,
            "score_band": list(self.score_band),
            "reason": self.reason,
            "adversarial": self.adversarial,
            "split": self.split,
            "camera_id": self.camera_id,
            "batch": self.batch,
            "detections": self.detections,
        }
        if self.history is not None:
            body["history"] = self.history
        if self.situation is not None:
            body["situation"] = self.situation
        return json.dumps(body, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Scenario:
        band = raw["score_band"]
        return cls(
            scenario_id=str(raw["scenario_id"]),
            category=str(raw["category"]),
            expected_level=str(raw["expected_level"]),
            score_band=(int(band[0]), int(band[1])),
            reason=str(raw["reason"]),
            adversarial=bool(raw.get("adversarial", False)),
            camera_id=str(raw["camera_id"]),
            batch=dict(raw["batch"]),
            detections=[dict(d) for d in raw["detections"]],
            split=str(raw.get("split", "holdout")),
            history=dict(raw["history"]) if raw.get("history") is not None else None,
            situation=str(raw["situation"]) if raw.get("situation") is not None else None,
        )


# ----------------------------------------------------------------------------------------------- rendering
def _day_with_weekday(rng: random.Random, weekday: int | None) -> datetime:
    day = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(days=rng.randrange(0, 28))
    if weekday is not None:
        day += timedelta(days=(weekday - day.weekday()) % 7)
    return day


def _render(rng: random.Random, scenario_id: str, scene: Scene) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    day = datetime(*scene.date, tzinfo=UTC) if scene.date else _day_with_weekday(rng, scene.weekday)
    start = day + timedelta(seconds=round(rng.uniform(*scene.hours) * 3600))
    span = rng.uniform(*scene.span_s)
    frames: list[tuple[float, int, int, Actor]] = []
    for number, actor in enumerate(scene.actors):
        for frame in range(actor.frames):
            offset = 0.0 if actor.frames == 1 else span * frame / (actor.frames - 1)
            frames.append((round(offset + number * 0.4, 1), number, frame, actor))
    frames.sort(key=lambda item: (item[0], item[1]))
    detections = []
    for index, (offset, number, frame, actor) in enumerate(frames):
        ts = start + timedelta(seconds=offset)
        caption = actor.captions[frame % len(actor.captions)]
        detection: dict[str, Any] = {
            "detection_id": f"{scenario_id}-{index:03d}",
            "camera_id": scene.camera,
            "ts": ts.isoformat().replace("+00:00", "Z"),
            "label": actor.label,
            "confidence": reading(rng, actor.conf),
            "bbox": [0.2, 0.2, 0.5, 0.9],
            "zone": actor.zone,
            "enrichment": _enrichment(rng, scene, actor, caption, frame),
        }
        if actor.tracked:
            detection["track_id"] = f"{scenario_id}-t{number}"
        detections.append(detection)
    first, last = detections[0]["ts"], detections[-1]["ts"]
    last_dt = datetime.fromisoformat(last.replace("Z", "+00:00"))
    closes = min(start + timedelta(seconds=90), last_dt + timedelta(seconds=30))
    batch = {
        "batch_id": f"eval:{scenario_id}",
        "camera_id": scene.camera,
        "started_at": first,
        "last_ts": last,
        "closes_at": closes.isoformat().replace("+00:00", "Z"),
        "close_reason": "idle" if closes < start + timedelta(seconds=90) else "window",
        "detection_count": len(detections),
    }
    return batch, detections


def _enrichment(rng: random.Random, scene: Scene, actor: Actor, caption: str, frame: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "florence": {
            "caption": caption,
            "dense_caption": f"{caption}, {scene.description}",
            "regions": [
                {"label": label, "caption": text, "bbox": [0.3, 0.4, 0.5, 0.7]} for label, text in actor.regions
            ],
        },
        "scene": {"description": scene.description, "lighting": scene.lighting, "indoor": scene.camera == "garage"},
        "weather": dict(scene.weather),
        "depth": {"distance_m": reading(rng, actor.distance_m, 1)},
    }
    if actor.clip:
        out["clip"] = [{"label": label, "score": reading(rng, bounds)} for label, bounds in actor.clip]
    if actor.pose:
        out["pose"] = {"posture": rng.choice(list(actor.pose)), "score": reading(rng, (0.6, 0.95), 2)}
    if actor.action:
        out["action"] = {"label": actor.action[0], "score": reading(rng, actor.action[1], 2)}
    if actor.clothing:
        out["clothing"] = {"description": actor.clothing[0], "suspicious": actor.clothing[1]}
    if actor.violence_frames:
        out["violence"] = {"score": actor.violence_frames[frame % len(actor.violence_frames)]}
    elif actor.violence:
        out["violence"] = {"score": reading(rng, actor.violence, 2)}
    if actor.reid:
        out["reid"] = dict(actor.reid)
    if actor.vehicle:
        out["vehicle"] = {key: value for key, value in actor.vehicle.items() if value is not None}
    if actor.pet:
        out["pet"] = {"species": actor.pet, "score": reading(rng, (0.6, 0.95), 2)}
    return out


def split_for(category: str, index: int) -> str:
    """Deterministic, stratified: within each category the scenarios alternate tune/holdout, starting on the side a
    hash of the category's name picks (so a category of one is not always "tune"). Each level and kind is on both
    sides; a category of one lands on one side."""
    offset = int(hashlib.sha256(category.encode()).hexdigest(), 16) % 2
    return SPLITS[(index + offset) % 2]


def generate_scenarios(seed: int = SCENARIO_SEED) -> list[Scenario]:
    """The labeled set, in category order; same seed -> same scenarios, byte for byte."""
    rng = random.Random(seed)
    scenarios: list[Scenario] = []
    for category in load_categories():
        for index in range(category.count):
            scenario_id = f"s{len(scenarios) + 1:03d}"
            scene = category.build(rng)
            batch, detections = _render(rng, scenario_id, scene)
            scenarios.append(
                Scenario(
                    scenario_id=scenario_id,
                    camera_id=scene.camera,
                    batch=batch,
                    detections=detections,
                    split="holdout" if category.group == HOLDOUT_ONLY_GROUP else split_for(category.name, index),
                    history=scene.history,
                    **category.label,
                )
            )
    return scenarios


def scenarios_jsonl(scenarios: Iterable[Scenario]) -> str:
    return "".join(scenario.to_json() + "\n" for scenario in scenarios)


class ScenarioFileError(ValueError):
    """The scenario file is unreadable or a line is not a scenario; the message names the file and line."""


def load_scenarios(path: str | Path = SCENARIOS_PATH) -> list[Scenario]:
    """Read a scenario file (JSON Lines, one scenario per line)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ScenarioFileError(f"cannot read scenarios {path}: {exc.strerror or exc}") from None
    scenarios = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            scenario = Scenario.from_dict(json.loads(line))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise ScenarioFileError(f"{path}:{number}: not a scenario ({type(exc).__name__}: {exc})") from None
        if scenario.split not in SPLITS:
            raise ScenarioFileError(f"{path}:{number}: split {scenario.split!r} is not one of {SPLITS}")
        if scenario.expected_level not in LEVELS:
            raise ScenarioFileError(
                f"{path}:{number}: expected_level {scenario.expected_level!r} is not one of {LEVELS}"
            )
        scenarios.append(scenario)
    ids = [s.scenario_id for s in scenarios]
    if len(set(ids)) != len(ids):
        raise ScenarioFileError(f"{path}: scenario ids are not unique")
    return scenarios


def scenario_profiles() -> dict[str, CameraProfile]:
    """The example camera profiles, as the scenarios' labels assume them."""
    text = SCENARIO_CAMERAS_PATH.read_text(encoding="utf-8")
    return parse_camera_profiles(text, source=str(SCENARIO_CAMERAS_PATH))


def select_scenarios(
    scenarios: Sequence[Scenario],
    limit: int | None = None,
    scenario_ids: Sequence[str] | None = None,
    split: str | None = None,
) -> list[Scenario]:
    """`split` (tune / holdout) first, then `scenario_ids` (in the set's order; an unknown id is an error), else the
    first `limit` scenarios taken round-robin over categories (a small subset still covers every kind)."""
    if split is not None:
        if split not in SPLITS:
            raise ScenarioFileError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
        scenarios = [s for s in scenarios if s.split == split]
    if scenario_ids:
        known = {s.scenario_id for s in scenarios}
        unknown = [sid for sid in scenario_ids if sid not in known]
        if unknown:
            raise ScenarioFileError(f"unknown scenario id(s): {', '.join(unknown)}")
        wanted = set(scenario_ids)
        scenarios = [s for s in scenarios if s.scenario_id in wanted]
    if limit is None or limit >= len(scenarios):
        return list(scenarios)
    by_category: dict[str, list[Scenario]] = {}
    for scenario in scenarios:
        by_category.setdefault(scenario.category, []).append(scenario)
    chosen: list[Scenario] = []
    round_no = 0
    while len(chosen) < limit:
        for members in by_category.values():
            if round_no < len(members) and len(chosen) < limit:
                chosen.append(members[round_no])
        round_no += 1
    order = {s.scenario_id: i for i, s in enumerate(scenarios)}
    return sorted(chosen, key=lambda s: order[s.scenario_id])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the labeled evaluation scenarios (stored in the repo).")
    parser.add_argument("--write", action="store_true", help=f"write {SCENARIOS_PATH}")
    parser.add_argument("--seed", type=int, default=SCENARIO_SEED)
    args = parser.parse_args(argv)
    text = scenarios_jsonl(generate_scenarios(args.seed))
    if args.write:
        SCENARIOS_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {text.count(chr(10))} scenarios to {SCENARIOS_PATH}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
