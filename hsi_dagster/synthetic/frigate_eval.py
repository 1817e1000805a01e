"""The Frigate-shaped labeled set: the situations of frigate_situations.py drawn into scenes and rendered as the MQTT
payloads Frigate 0.14-0.16 publishes, one Frigate config, and one label per scene.

Rendering follows Frigate's publishing (see synthetic/frigate.py): per tracked object `frigate/events` `new` (its
`before` still a false positive), an `update` per step (zones, moves, a recognised face or plate, attributes), once
a minute while it stands still (`stationary`, `motionless_count`), `end` with `end_time`; the GenAI description on
`frigate/tracked_object_update` after the end; the scene's review on `frigate/reviews` (`new`, `end`, and `genai`
with the review summary's `potential_threat_level` where the situation has one). Overlapping zones (a porch inside
the walkway) are both in `current_zones`. No hsi camera profile: what a new Frigate user has.

Stored in `hsi_dagster/data/frigate_eval/`: `payloads.jsonl` (`topic payload` lines, as `mosquitto_sub -v` prints
them and `hsi frigate import` reads them), `labels.jsonl` (one scene a line: camera, time span, level, band, reason,
split) and `frigate.yaml`. One `random.Random(seed)`, no clock: a test checks the stored files equal the generator's
output. Regenerate with `python -m hsi_dagster.synthetic.frigate_eval --write`.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from hsi_dagster.synthetic.frigate_situations import FRIGATE_CAMERAS, OVERLAPS, SITUATIONS, Obj, Situation
from hsi_dagster.synthetic.scenarios import LEVELS, SPLITS, split_for

FRIGATE_EVAL_SEED = 4040
FRIGATE_EVAL_DIR = Path(__file__).resolve().parents[1] / "data" / "frigate_eval"
PAYLOADS_FILE, LABELS_FILE, CONFIG_FILE = "payloads.jsonl", "labels.jsonl", "frigate.yaml"
FIRST_DAY = datetime(2026, 11, 20, tzinfo=UTC)  # one scene a day from here: Europe/London is UTC until late March
MATCH_SLACK_S = 90.0  # a batch within this long after a scene's last object ended still belongs to it


@dataclass(frozen=True)
class SceneLabel:
    """One labeled scene: what a household would say of everything its camera saw from `start` to `end`."""

    scene_id: str
    category: str
    camera_id: str
    start: float  # epoch seconds, the first object's first frame
    end: float  # the last object's end_time
    expected_level: str
    score_band: tuple[int, int]
    reason: str
    adversarial: bool
    split: str

    def covers(self, camera_id: str, first: float, last: float) -> bool:
        """A batch of `camera_id` from `first` to `last` (epoch seconds) falls within this scene."""
        return camera_id == self.camera_id and first <= self.end + MATCH_SLACK_S and last >= self.start - 1.0

    def to_json(self) -> str:
        body = {
            "scene_id": self.scene_id,
            "category": self.category,
            "camera_id": self.camera_id,
            "start": _iso(self.start),
            "end": _iso(self.end),
            "expected_level": self.expected_level,
            "score_band": list(self.score_band),
            "reason": self.reason,
            "adversarial": self.adversarial,
            "split": self.split,
        }
        return json.dumps(body, ensure_ascii=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SceneLabel:
        band = raw["score_band"]
        label = cls(
            scene_id=str(raw["scene_id"]),
            category=str(raw["category"]),
            camera_id=str(raw["camera_id"]),
            start=_epoch(str(raw["start"])),
            end=_epoch(str(raw["end"])),
            expected_level=str(raw["expected_level"]),
            score_band=(int(band[0]), int(band[1])),
            reason=str(raw["reason"]),
            adversarial=bool(raw["adversarial"]),
            split=str(raw["split"]),
        )
        if label.expected_level not in LEVELS or label.split not in SPLITS:
            raise ValueError(f"scene {label.scene_id}: level {label.expected_level!r} or split {label.split!r} unknown")
        return label


@dataclass(frozen=True)
class FrigateEvalSet:
    lines: list[str]  # `topic payload`, in publish order
    labels: list[SceneLabel]
    config: dict[str, Any]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def frigate_config() -> dict[str, Any]:
    """Frigate's config for the set's cameras: detect resolutions, zones (polygons around each anchor; an
    overlapping zone drawn inside its outer one), GenAI and review settings as a 0.16 user has them."""
    cameras: dict[str, Any] = {}
    for name, (width, height, zones) in FRIGATE_CAMERAS.items():
        polygons = {}
        for zone, (x, y) in zones.items():
            half = 120 if zone in OVERLAPS.get(name, {}) else 260
            box = [max(0, x - half), max(0, y - half), min(width, x + half), min(height, y + 40)]
            polygons[zone] = {
                "coordinates": f"{box[0]},{box[1]},{box[2]},{box[1]},{box[2]},{box[3]},{box[0]},{box[3]}",
                "inertia": 3,
            }
        cameras[name] = {
            "ffmpeg": {"inputs": [{"path": f"rtsp://127.0.0.1:8554/{name}", "roles": ["detect", "record"]}]},
            "detect": {"width": width, "height": height, "fps": 5},
            "zones": polygons,
            "review": {"alerts": {"labels": ["person", "car", "knife"]}},
            "genai": {"enabled": True},
        }
    return {
        "mqtt": {"host": "127.0.0.1", "topic_prefix": "frigate"},
        "ui": {"timezone": "Europe/London"},
        "objects": {"track": ["person", "car", "cat", "dog", "fox", "package", "knife"]},
        "face_recognition": {"enabled": True},
        "lpr": {"enabled": True, "known_plates": {"family car": ["KX73 ABC"]}},
        "genai": {"enabled": True, "provider": "ollama", "model": "llava"},
        "cameras": cameras,
    }


class _Scene:
    """Renders one scene's payloads (publish time, order, topic, payload)."""

    def __init__(self, rng: random.Random, situation: Situation, start: float) -> None:
        self.rng, self.situation, self.start = rng, situation, start
        self.width, self.height, self.anchors = FRIGATE_CAMERAS[situation.camera]
        self.messages: list[tuple[float, str, dict[str, Any]]] = []
        self.ids: list[str] = []
        self.labels: list[str] = []
        self.zones: list[str] = []
        self.end = start

    def _id(self, t: float) -> str:
        return f"{t:.6f}-" + "".join(self.rng.choice(string.ascii_lowercase + string.digits) for _ in range(6))

    def _zones(self, zones: tuple[str, ...]) -> list[str]:
        out = list(zones)
        for inner in zones:
            outer = OVERLAPS.get(self.situation.camera, {}).get(inner)
            if outer is not None and outer not in out:
                out.insert(0, outer)
        return out

    def _box(self, label: str, zone: str) -> list[int]:
        x, y = self.anchors[zone]
        w, h = {"person": (110, 320), "car": (460, 300), "package": (70, 60), "knife": (40, 30)}.get(label, (90, 60))
        x += self.rng.randint(-20, 20)
        y += self.rng.randint(-10, 10)
        if label == "knife":
            y -= 160
        x1, y1 = max(0, min(self.width - w, x - w // 2)), max(0, min(self.height - h, y - h))
        return [x1, y1, x1 + w, y1 + h]

    def render(self, description: str | None) -> None:
        for number, obj in enumerate(self.situation.objects):
            self._object(
                obj, self.start + obj.offset_s, description if number == 0 and description else obj.description
            )
        self._review()

    def _object(self, obj: Obj, t: float, description: str | None) -> None:
        object_id = self._id(t)
        self.ids.append(object_id)
        self.labels.append(obj.label)
        top, entered = 0.0, []
        attributes: dict[str, float] = {}
        published: dict[str, Any] | None = None
        state: dict[str, Any] = {}
        path: list[list[Any]] = []
        steps = [(zones, False, 0) for zones in obj.zones]
        if obj.dwell_s:
            still = int(obj.dwell_s // 60) + 1
            steps += [(obj.zones[-1], True, minute) for minute in range(still)]
        for index, (zones, stationary, minute) in enumerate(steps):
            if index:
                t += 60.0 + self.rng.uniform(0, 0.5) if stationary and minute else self.rng.uniform(*obj.gap_s)
            current = self._zones(zones)
            entered += [z for z in current if z not in entered]
            self.zones += [z for z in current if z not in self.zones]
            box = published["box"] if stationary and published else self._box(obj.label, zones[-1])
            if stationary:
                box = [box[0] + self.rng.randint(-2, 2), box[1], box[2], box[3]]
            score = round(self.rng.uniform(*obj.score), 4)
            top = max(top, score)
            centre = [round((box[0] + box[2]) / 2 / self.width, 4), round(box[3] / self.height, 4)]
            if not stationary:
                path.append([centre, round(t, 6)])
            sub_label = list(obj.sub_label) if obj.sub_label and index >= obj.identity_from else None
            current_attributes = []
            if index >= 1:
                for name in obj.attributes:
                    attributes[name] = max(attributes.get(name, 0.0), round(self.rng.uniform(0.7, 0.92), 4))
                    current_attributes.append({"label": name, "score": attributes[name], "box": box})
            state = {
                "id": object_id,
                "camera": self.situation.camera,
                "frame_time": round(t, 6),
                "snapshot": None,
                "label": obj.label,
                "sub_label": sub_label,
                "top_score": round(top, 4),
                "false_positive": False,
                "start_time": round(self.start + obj.offset_s, 6),
                "end_time": None,
                "score": score,
                "box": box,
                "area": (box[2] - box[0]) * (box[3] - box[1]),
                "region": [max(0, box[0] - 40), max(0, box[1] - 40), box[2], box[3]],
                "active": not stationary,
                "stationary": stationary,
                "motionless_count": (25 + 300 * minute) if stationary else 0,
                "position_changes": len(path),
                "current_zones": current,
                "entered_zones": list(entered),
                "has_clip": True,
                "has_snapshot": True,
                "attributes": dict(attributes),
                "current_attributes": current_attributes,
                "pending_loitering": False,
                "max_severity": "alert" if obj.label in ("person", "car", "knife") else "detection",
                "path_data": [list(p) for p in path],
                "recognized_license_plate": list(obj.plate) if obj.plate and index >= 1 else None,
            }
            before = published if published is not None else {**state, "false_positive": True}
            kind = "new" if published is None else "update"
            self.messages.append((t, "frigate/events", {"type": kind, "before": before, "after": state}))
            published = json.loads(json.dumps(state))
        t += self.rng.uniform(1.0, 3.0)
        ended = {**state, "end_time": round(t, 6), "active": False}
        self.messages.append((t, "frigate/events", {"type": "end", "before": published, "after": ended}))
        self.end = max(self.end, t)
        if description:
            message = {"type": "description", "id": object_id, "description": description, "camera": ended["camera"]}
            self.messages.append(
                (t + self.rng.uniform(*obj.description_delay_s), "frigate/tracked_object_update", message)
            )

    def _review(self) -> None:
        review = self.situation.review
        first = self.start + min(o.offset_s for o in self.situation.objects)
        review_id = self._id(first)
        state: dict[str, Any] = {
            "id": review_id,
            "camera": self.situation.camera,
            "start_time": round(first, 6),
            "end_time": None,
            "severity": review.severity,
            "thumb_path": f"/media/frigate/clips/review/thumb-{self.situation.camera}-{review_id}.webp",
            "data": {
                "detections": list(self.ids),
                "objects": sorted(set(self.labels)),
                "sub_labels": sorted({o.sub_label[0] for o in self.situation.objects if o.sub_label}),
                "zones": list(self.zones),
                "audio": [],
            },
        }
        self.messages.append((first, "frigate/reviews", {"type": "new", "before": state, "after": state}))
        ended = {**state, "end_time": round(self.end + 0.5, 6)}
        self.messages.append((self.end + 0.5, "frigate/reviews", {"type": "end", "before": state, "after": ended}))
        if review.threat is not None:
            summary = {
                "title": review.summary.rstrip("."),
                "scene": review.summary,
                "shortSummary": review.summary,
                "confidence": round(self.rng.uniform(0.7, 0.95), 2),
                "potential_threat_level": review.threat,
                "other_concerns": [],
            }
            genai = {**ended, "data": {**ended["data"], "metadata": summary}}
            self.messages.append(
                (self.end + 20.0, "frigate/reviews", {"type": "genai", "before": ended, "after": genai})
            )


def generate_frigate_eval(seed: int = FRIGATE_EVAL_SEED) -> FrigateEvalSet:
    """The set, in situation order (scene ids f001...); same seed -> the same payloads and labels, byte for byte."""
    rng = random.Random(seed)
    published: list[tuple[float, int, str, dict[str, Any]]] = []
    labels: list[SceneLabel] = []
    for situation in SITUATIONS:
        for index in range(situation.count):
            number = len(labels)
            scene_id = f"f{number + 1:03d}"
            day = FIRST_DAY + timedelta(days=number)
            start = day.timestamp() + round(rng.uniform(*situation.hours) * 3600)
            description = rng.choice(situation.descriptions) if situation.descriptions else None
            scene = _Scene(rng, situation, start)
            scene.render(description)
            published += [(t, len(published) + i, topic, body) for i, (t, topic, body) in enumerate(scene.messages)]
            labels.append(
                SceneLabel(
                    scene_id=scene_id,
                    category=situation.category,
                    camera_id=situation.camera,
                    start=start + min(o.offset_s for o in situation.objects),
                    end=scene.end,
                    expected_level=situation.level,
                    score_band=situation.band,
                    reason=situation.reason,
                    adversarial=situation.adversarial,
                    split=split_for(situation.category, index),
                )
            )
    published.sort(key=lambda m: (m[0], m[1]))
    lines = [
        f"{topic} {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}" for _, _, topic, body in published
    ]
    return FrigateEvalSet(lines, labels, frigate_config())


def set_files(generated: FrigateEvalSet) -> dict[str, str]:
    """File name -> text, as stored."""
    return {
        PAYLOADS_FILE: "\n".join(generated.lines) + "\n",
        LABELS_FILE: "".join(label.to_json() + "\n" for label in generated.labels),
        CONFIG_FILE: yaml.safe_dump(generated.config, sort_keys=False),
    }


class FrigateSetError(ValueError):
    """The stored Frigate set is unreadable; the message names the file and line."""


def load_labels(folder: str | Path = FRIGATE_EVAL_DIR) -> list[SceneLabel]:
    path = Path(folder) / LABELS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FrigateSetError(f"cannot read {path}: {exc.strerror or exc}") from None
    labels = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            labels.append(SceneLabel.from_dict(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise FrigateSetError(f"{path}:{number}: not a scene label ({type(exc).__name__}: {exc})") from None
    if len({label.scene_id for label in labels}) != len(labels):
        raise FrigateSetError(f"{path}: scene ids are not unique")
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the Frigate-shaped labeled set (stored in the repo).")
    parser.add_argument("--write", action="store_true", help=f"write {FRIGATE_EVAL_DIR}/")
    parser.add_argument("--seed", type=int, default=FRIGATE_EVAL_SEED)
    args = parser.parse_args(argv)
    generated = generate_frigate_eval(args.seed)
    files = set_files(generated)
    if args.write:
        FRIGATE_EVAL_DIR.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (FRIGATE_EVAL_DIR / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(generated.labels)} scenes, {len(generated.lines)} payloads to {FRIGATE_EVAL_DIR}")
    else:
        sys.stdout.write(files[LABELS_FILE])
    return 0


if __name__ == "__main__":
    sys.exit(main())
