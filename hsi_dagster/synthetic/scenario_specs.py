"""The labeled scenarios as data: `data/scenario_specs.toml` read into categories, each drawing its scenes.

The spec file's header says what every field means; this module is its one interpreter. The random draws happen in
a fixed order (the variant, `draw`, each actor's frames, zone, clothing, violence_frames and reid, then
`draw_after_actors`, `when`, `weather`, `weekday`), the order the stored set `eval_scenarios.jsonl` was drawn in:
change it and every scenario after the change is drawn anew.
"""

from __future__ import annotations

import functools
import random
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hsi_dagster.synthetic.scenario_kit import Actor, Scene, night, reading, resident, stranger

SPECS_PATH = Path(__file__).resolve().parents[1] / "data" / "scenario_specs.toml"
# Generated in this order: adding a category at the end of the last group renumbers nothing before it.
GROUPS = ("base", "hard", "with_history", "unseen")
HOLDOUT_ONLY_GROUP = "unseen"  # issue 41: situations the floor was not written for, never tuned on

_CATEGORY_FIELDS = frozenset({"category", "count", "level", "band", "reason", "adversarial"})
_DERIVED_FIELDS = frozenset({"based_on", "injected_caption", "first_actor"})
_SCENE_FIELDS = frozenset(
    {"camera", "when", "lighting", "description", "weather", "weekday", "span_s", "date", "history"}
    | {"draw", "draw_after_actors", "actors", "variants", "first_variant_chance"}
)
_ACTOR_FIELDS = frozenset(
    {"label", "conf", "frames", "zone", "captions", "clip", "regions", "pose", "action", "clothing"}
    | {"clothing_suspicious", "violence", "violence_frames", "reid", "vehicle", "pet", "distance_m", "tracked"}
    | {"for_each"}
)
_WHOLE_NAME = re.compile(r"\{(\w+)\}")


class ScenarioSpecError(ValueError):
    """The spec file is unreadable or a category is not a valid spec; the message names the category and field."""


@dataclass(frozen=True)
class Category:
    """One labeled kind of scene: `count` scenarios, each drawn from `scene` (the spec, `based_on` resolved).
    `label` holds what every scenario of the category is labeled with, under the names `Scenario` gives them
    (category, expected_level, score_band, reason, adversarial)."""

    name: str
    group: str
    count: int
    label: Mapping[str, Any] = field(compare=False, hash=False)
    scene: Mapping[str, Any] = field(compare=False, hash=False, repr=False)

    def build(self, rng: random.Random) -> Scene:
        try:
            return _build_scene(rng, self.scene)
        except KeyError as exc:
            raise ScenarioSpecError(
                f"category {self.name!r}: no name or field {exc} (drawn too late, or missing)"
            ) from None


@functools.cache
def load_categories(path: Path = SPECS_PATH) -> tuple[Category, ...]:
    """Every category of the spec file, group after group, in the file's order within a group."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioSpecError(f"cannot read scenario specs {path}: {exc}") from None
    unknown_groups = set(raw) - set(GROUPS)
    if unknown_groups:
        raise ScenarioSpecError(f"{path}: unknown group(s) {sorted(unknown_groups)}, expected {GROUPS}")
    named = [(spec.get("category"), spec) for group in GROUPS for spec in raw.get(group, [])]
    by_name = dict(named)
    if len(by_name) != len(named):
        twice = sorted({str(name) for name, _ in named if [n for n, _ in named].count(name) > 1})
        raise ScenarioSpecError(f"{path}: category names are not unique: {twice}")
    return tuple(_category(path, group, spec, by_name) for group in GROUPS for spec in raw.get(group, []))


def _category(path: Path, group: str, spec: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> Category:
    where = f"{path.name}: category {spec.get('category', '?')!r}"
    unknown = set(spec) - _CATEGORY_FIELDS - _DERIVED_FIELDS - _SCENE_FIELDS
    if unknown:
        raise ScenarioSpecError(f"{where}: unknown field(s) {sorted(unknown)}")
    scene = _resolve_base(where, spec, by_name)
    for variant in scene.get("variants", []):
        if set(variant) - _SCENE_FIELDS:
            raise ScenarioSpecError(f"{where}: unknown variant field(s) {sorted(set(variant) - _SCENE_FIELDS)}")
    for actor in [*scene.get("actors", []), *(a for v in scene.get("variants", []) for a in v["actors"])]:
        if set(actor) - _ACTOR_FIELDS:
            raise ScenarioSpecError(f"{where}: unknown actor field(s) {sorted(set(actor) - _ACTOR_FIELDS)}")
    try:
        name = str(spec["category"])
        label = {
            "category": name,
            "expected_level": str(spec["level"]),
            "score_band": (int(spec["band"][0]), int(spec["band"][1])),
            "reason": str(spec["reason"]),
            "adversarial": bool(spec.get("adversarial", False)),
        }
        return Category(name=name, group=group, count=int(spec["count"]), label=label, scene=scene)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ScenarioSpecError(f"{where}: {type(exc).__name__}: {exc}") from None


def _resolve_base(where: str, spec: dict[str, Any], by_name: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The scene fields; a `based_on` category's scene with this one's fields over it, the injected caption first
    among the first actor's captions and `first_actor`'s fields over that actor's."""
    own = {key: value for key, value in spec.items() if key not in _CATEGORY_FIELDS | _DERIVED_FIELDS}
    if "based_on" not in spec:
        return own
    if spec["based_on"] not in by_name:
        raise ScenarioSpecError(f"{where}: based_on {spec['based_on']!r} is not a category")
    scene = {**_resolve_base(where, by_name[spec["based_on"]], by_name), **own}
    first, *others = scene["actors"]
    first = {**first, **spec.get("first_actor", {})}
    if "injected_caption" in spec:
        first["captions"] = [spec["injected_caption"], *first["captions"]]
    return {**scene, "actors": [first, *others]}


# ----------------------------------------------------------------------------------------------- drawing
def _build_scene(rng: random.Random, spec: Mapping[str, Any]) -> Scene:
    if "variants" in spec:
        first, second = spec["variants"]
        spec = first if rng.random() < spec["first_variant_chance"] else second
    names: dict[str, Any] = {}
    _draw_names(rng, spec.get("draw", {}), names)
    actors = [actor for raw in spec["actors"] for actor in _actors(rng, raw, names)]
    _draw_names(rng, spec.get("draw_after_actors", {}), names)
    hours = _when(rng, spec["when"], names)
    optional: dict[str, Any] = {}
    if "weather" in spec:
        weather = _fill(spec["weather"], names)
        optional["weather"] = {key: _one_of(rng, value) for key, value in weather.items()}
    if "weekday" in spec:
        optional["weekday"] = _number_in(rng, spec["weekday"])
    if "span_s" in spec:
        optional["span_s"] = _pair(spec["span_s"])
    if "date" in spec:
        year, month, day = spec["date"]
        optional["date"] = (year, month, day)
    if "history" in spec:
        optional["history"] = _history(_fill(spec["history"], names))
    return Scene(
        camera=_fill(spec["camera"], names),
        hours=hours,
        actors=actors,
        lighting=_fill(spec["lighting"], names),
        description=_fill(spec["description"], names),
        **optional,
    )


def _draw_names(rng: random.Random, draws: Mapping[str, Any], names: dict[str, Any]) -> None:
    """Each name in the order written: one of a list (a drawn table gives its keys as names), or a drawn number or
    sample."""
    for name, how in draws.items():
        how = _fill(how, names)
        if isinstance(how, list):
            value = rng.choice(how)
            if isinstance(value, dict):
                names.update(value)
                continue
        elif not isinstance(how, dict):
            raise ScenarioSpecError(f"draw {name!r}: {how!r} is not a list, randint, uniform or sample")
        elif "randint" in how:
            value = rng.randint(*how["randint"])
        elif "uniform" in how:
            value = reading(rng, _pair(how["uniform"]), how["digits"])
        elif "sample" in how:
            value = rng.sample(how["sample"], how["k"])
        else:
            raise ScenarioSpecError(f"draw {name!r}: {how!r} is not a list, randint, uniform or sample")
        names[name] = value


def _actors(rng: random.Random, raw: Mapping[str, Any], names: dict[str, Any]) -> Iterator[Actor]:
    if "for_each" not in raw:
        yield _actor(rng, raw, names)
        return
    ((name, values),) = raw["for_each"].items()
    single = {key: value for key, value in raw.items() if key != "for_each"}
    for value in _fill(values, names):
        yield _actor(rng, single, {**names, name: value})


def _actor(rng: random.Random, raw: Mapping[str, Any], names: dict[str, Any]) -> Actor:
    spec = _fill(raw, names)
    frames = _number_in(rng, spec["frames"])
    zone = _one_of(rng, spec["zone"])
    clothing = _one_of(rng, spec["clothing"]) if "clothing" in spec else None
    violence_frames = _violence_frames(rng, spec["violence_frames"], frames) if "violence_frames" in spec else []
    reid = _reid(rng, spec.get("reid"))
    action = spec.get("action")
    return Actor(
        label=spec["label"],
        conf=_pair(spec["conf"]),
        frames=frames,
        zone=zone,
        captions=list(spec["captions"]),
        clip=[(text, (low, high)) for text, low, high in spec.get("clip", [])],
        regions=[(label, text) for label, text in spec.get("regions", [])],
        pose=list(spec.get("pose", [])),
        action=(action[0], (action[1], action[2])) if action else None,
        clothing=(clothing, bool(spec.get("clothing_suspicious", False))) if clothing is not None else None,
        violence=_pair(spec["violence"]) if "violence" in spec else None,
        reid=reid,
        vehicle=spec.get("vehicle"),
        pet=spec.get("pet"),
        distance_m=_pair(spec.get("distance_m", (2.0, 8.0))),
        tracked=bool(spec.get("tracked", True)),
        violence_frames=violence_frames,
    )


def _violence_frames(rng: random.Random, spec: Mapping[str, Any], frames: int) -> list[float]:
    """Calm per-frame scores; with `spike`, one frame (neither the first nor the last) spikes."""
    spike = rng.randrange(1, frames - 1) if "spike" in spec else None
    scores = [reading(rng, _pair(spec["calm"]), 2) for _ in range(frames)]
    if spike is not None:
        scores[spike] = reading(rng, _pair(spec["spike"]), 2)
    return scores


def _reid(rng: random.Random, spec: Any) -> dict[str, Any] | None:
    if spec is None:
        return None
    if spec == "stranger":
        return stranger(rng)
    if isinstance(spec, str):
        return resident(rng, spec)
    return {
        key: reading(rng, _pair(value), 2) if key == "score" and isinstance(value, list) else value
        for key, value in spec.items()
    }


def _when(rng: random.Random, spec: Any, names: dict[str, Any]) -> tuple[float, float]:
    if isinstance(spec, list) and not _is_pair(spec):
        spec = rng.choice(spec)
    if isinstance(spec, dict) and "hours" in spec:
        names.update({key: value for key, value in spec.items() if key != "hours"})
        spec = spec["hours"]
    if spec == "night":
        return night(rng)
    if isinstance(spec, dict):
        start = rng.choice(spec["start"])
        return (start, start + spec["lasting"])
    if _is_pair(spec):
        return _pair(spec)
    raise ScenarioSpecError(f"when: {spec!r} is not [from, to], 'night', {{start, lasting}} or a list of those")


def _history(spec: dict[str, Any]) -> dict[str, Any]:
    """core/context/history.py's JSON shape: `days` written out day by day, a recent sighting's missing risk level
    null."""
    out = dict(spec)
    if "days" in out:
        days = out["days"]
        quiet = set(days.get("except", ()))
        out["days"] = [
            {"days_ago": ago, "labels_in_hour": [] if ago in quiet else list(days["seen_in_hour"])}
            for ago in range(1, days["every"] + 1)
        ]
    if "recent" in out:
        out["recent"] = [{**sighting, "risk_level": sighting.get("risk_level")} for sighting in out["recent"]]
    return out


# ----------------------------------------------------------------------------------------------- values
def _fill(value: Any, names: Mapping[str, Any]) -> Any:
    """Text with `{name}` filled in, in lists and tables too; a value that is exactly `{name}` is the drawn value."""
    if isinstance(value, str):
        whole = _WHOLE_NAME.fullmatch(value)
        return names[whole[1]] if whole else value.format_map(names)
    if isinstance(value, list):
        return [_fill(item, names) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, names) for key, item in value.items()}
    return value


def _one_of(rng: random.Random, value: Any) -> Any:
    return rng.choice(value) if isinstance(value, list) else value


def _number_in(rng: random.Random, value: Any) -> int:
    return rng.randint(*value) if isinstance(value, list) else int(value)


def _is_pair(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value)


def _pair(value: Any) -> tuple[float, float]:
    low, high = value
    return (low, high)
