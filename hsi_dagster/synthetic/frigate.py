"""A seeded, recorded-looking Frigate night: MQTT payloads as Frigate publishes them, its config and its API answer.

Frigate's publishing rules are followed (frigate/track/tracked_object.py, track/object_processing.py): `new` when a
tracked object stops being a false positive, `update` on a zone change, a move from stationary, a new sub_label
or plate, a better snapshot, and at least once a minute while it is tracked (the parked car below keeps doing
that all night), `end` when tracking stops; `before` is the previously published state. GenAI descriptions come
on `tracked_object_update` a few seconds after the end; review items on `reviews`. Same seed and start ->
byte-identical output (one `random.Random`, no clock).

Scenes: a resident walking up to the front door (face recognised), a car arriving and parking in the driveway
(plate read, then parked for the rest of the segment), a cat crossing the backyard, an unknown person lingering
by the shed at night, and, with `malformed=True`, broken payloads (not JSON, a missing camera, a box outside the
detect resolution, an unknown camera).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

CAMERAS: dict[str, tuple[int, int]] = {"front_door": (1280, 720), "driveway": (1920, 1080), "backyard": (1280, 720)}
ZONES = {"front_door": ("walkway", "porch"), "driveway": ("street", "driveway"), "backyard": ("lawn", "shed")}
DEFAULT_START = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
PARKED_MINUTES = 20  # periodic updates of the parked car (one a minute)


def frigate_config() -> dict[str, Any]:
    """A Frigate config with the cameras' detect resolutions (what `hsi frigate import --frigate-config` reads)."""
    cameras: dict[str, Any] = {}
    for name, (width, height) in CAMERAS.items():
        cameras[name] = {
            "ffmpeg": {"inputs": [{"path": f"rtsp://127.0.0.1:8554/{name}", "roles": ["detect", "record"]}]},
            "detect": {"width": width, "height": height, "fps": 5},
            "zones": {zone: {"coordinates": "0,0,1,0,1,1,0,1"} for zone in ZONES[name]},
        }
    cameras["driveway"]["detect"] = {"fps": 5}  # resolution from the top-level detect section below
    return {
        "mqtt": {"host": "127.0.0.1", "topic_prefix": "frigate"},
        "detect": {"width": 1920, "height": 1080},
        "cameras": cameras,
    }


def frigate_config_yaml() -> str:
    return yaml.safe_dump(frigate_config(), sort_keys=False)


@dataclass
class _Tracked:
    """One tracked object's published state, updated as the scene goes on."""

    object_id: str
    camera: str
    label: str
    start: float
    state: dict[str, Any] = field(default_factory=dict)
    published: dict[str, Any] | None = None
    path: list[list[Any]] = field(default_factory=list)

    def snapshot(self, t: float, box: list[int], score: float, **changes: Any) -> dict[str, Any]:
        width, height = CAMERAS[self.camera]
        centre = [round((box[0] + box[2]) / 2 / width, 4), round(box[3] / height, 4)]
        if not self.path or max(abs(centre[0] - self.path[-1][0][0]), abs(centre[1] - self.path[-1][0][1])) >= 0.05:
            self.path.append([centre, round(t, 6)])
        top = max(self.state.get("top_score", 0.0), score)
        state = {
            "id": self.object_id,
            "camera": self.camera,
            "frame_time": round(t, 6),
            "snapshot": None,
            "label": self.label,
            "sub_label": self.state.get("sub_label"),
            "top_score": round(top, 4),
            "false_positive": False,
            "start_time": self.start,
            "end_time": None,
            "score": round(score, 4),
            "box": box,
            "area": (box[2] - box[0]) * (box[3] - box[1]),
            "ratio": round((box[2] - box[0]) / (box[3] - box[1]), 4),
            "region": [max(0, box[0] - 40), max(0, box[1] - 40), min(width, box[2] + 40), min(height, box[3] + 40)],
            "active": True,
            "stationary": False,
            "motionless_count": 0,
            "position_changes": self.state.get("position_changes", 1),
            "current_zones": self.state.get("current_zones", []),
            "entered_zones": self.state.get("entered_zones", []),
            "has_clip": True,
            "has_snapshot": True,
            "attributes": {},
            "current_attributes": [],
            "pending_loitering": False,
            "max_severity": "alert" if self.label == "person" else "detection",
            "current_estimated_speed": 0,
            "average_estimated_speed": 0,
            "velocity_angle": 0,
            "path_data": [list(point) for point in self.path],
            "recognized_license_plate": self.state.get("recognized_license_plate"),
        }
        state.update(changes)
        for zone in state["current_zones"]:
            if zone not in state["entered_zones"]:
                state["entered_zones"] = [*state["entered_zones"], zone]
        state["active"] = not state["stationary"]
        self.state = state
        return state


class _Night:
    def __init__(self, seed: int, start: datetime) -> None:
        self.rng = random.Random(seed)
        self.t0 = start.timestamp()
        self.messages: list[tuple[float, int, str, Any]] = []
        self.api_items: list[dict[str, Any]] = []
        self.order = 0

    def publish(self, t: float, topic: str, payload: Any) -> None:
        self.order += 1
        self.messages.append((t, self.order, topic, payload))

    def track(self, camera: str, label: str, start: float) -> _Tracked:
        suffix = "".join(self.rng.choice(string.ascii_lowercase + string.digits) for _ in range(6))
        return _Tracked(f"{start:.6f}-{suffix}", camera, label, round(start, 6))

    def emit(
        self, obj: _Tracked, t: float, box: list[int], score: float, kind: str | None = None, **changes: Any
    ) -> None:
        after = obj.snapshot(t, box, score, **changes)
        if kind is None:
            kind = "new" if obj.published is None else "update"
        before = obj.published if obj.published is not None else {**after, "false_positive": True}
        self.publish(t, "frigate/events", {"type": kind, "before": before, "after": after})
        obj.published = json.loads(json.dumps(after))

    def end(self, obj: _Tracked, t: float, description: str | None = None) -> None:
        after = {**obj.state, "end_time": round(t, 6)}
        self.publish(t, "frigate/events", {"type": "end", "before": obj.published, "after": after})
        obj.published = after
        if description is not None:
            self.publish(
                t + 4.0 + self.rng.random(),
                "frigate/tracked_object_update",
                {"type": "description", "id": obj.object_id, "description": description, "camera": obj.camera},
            )
        self.api_items.append(self._api_item(obj, after, description))

    def _api_item(self, obj: _Tracked, final: dict[str, Any], description: str | None) -> dict[str, Any]:
        width, height = CAMERAS[obj.camera]
        x1, y1, x2, y2 = final["box"]
        sub_label = final.get("sub_label")
        plate = final.get("recognized_license_plate")
        data: dict[str, Any] = {
            "box": [x1 / width, y1 / height, (x2 - x1) / width, (y2 - y1) / height],
            "region": None,
            "score": final["score"],
            "top_score": final["top_score"],
            "attributes": [],
            "type": "object",
            "max_severity": final["max_severity"],
            "path_data": final["path_data"],
        }
        if sub_label:
            data["sub_label_score"] = sub_label[1]
        if plate:
            data["recognized_license_plate"], data["recognized_license_plate_score"] = plate
        if description:
            data["description"] = description
        return {
            "id": obj.object_id,
            "camera": obj.camera,
            "label": obj.label,
            "sub_label": sub_label[0] if sub_label else None,
            "zones": final["entered_zones"],
            "start_time": obj.start,
            "end_time": final["end_time"],
            "has_clip": True,
            "has_snapshot": True,
            "plus_id": None,
            "retain_indefinitely": False,
            "top_score": None,
            "false_positive": False,
            "box": None,
            "data": data,
        }

    def review(self, t: float, camera: str, objects: list[_Tracked], severity: str) -> None:
        review_id = f"{t:.6f}-{''.join(self.rng.choice(string.ascii_lowercase) for _ in range(6))}"
        state = {
            "id": review_id,
            "camera": camera,
            "start_time": round(t, 6),
            "end_time": None,
            "severity": severity,
            "thumb_path": f"/media/frigate/clips/review/thumb-{camera}-{review_id}.webp",
            "data": {
                "detections": [o.object_id for o in objects],
                "objects": [o.label for o in objects],
                "sub_labels": [],
                "zones": [],
                "audio": [],
            },
        }
        self.publish(t, "frigate/reviews", {"type": "new", "before": state, "after": state})

    def jitter(self, value: float, spread: float) -> int:
        return int(round(value + self.rng.uniform(-spread, spread)))

    # -------------------------------------------------------------------------------------------- scenes
    def resident_at_door(self, at: float) -> None:
        person = self.track("front_door", "person", at)
        steps = [(80, 300, []), (260, 320, ["walkway"]), (460, 340, ["walkway"]), (620, 360, ["porch"])]
        t = at + 0.8
        self.emit(person, t, [80, 300, 200, 640], 0.81)
        self.review(t, "front_door", [person], "alert")
        for index, (x, y, zones) in enumerate(steps[1:], start=1):
            t += 1.6 + self.rng.random() * 0.4
            box = [self.jitter(x, 4), self.jitter(y, 4), self.jitter(x + 130, 4), self.jitter(y + 340, 4)]
            sub_label = ["alice", 0.93] if index >= 2 else None
            self.emit(person, t, box, 0.86 + 0.03 * index, current_zones=zones, sub_label=sub_label)
            if index == 2:  # a better snapshot at the same place: Frigate publishes, nothing changed
                t += 0.6
                self.emit(
                    person, t, [box[0] + 2, box[1], box[2] + 2, box[3]], 0.9, current_zones=zones, sub_label=sub_label
                )
        t += 6.0
        self.end(person, t, "A woman with a grocery bag walks up the path to the front door and unlocks it.")

    def car_parks(self, at: float, minutes: int) -> float:
        car = self.track("driveway", "car", at)
        t = at + 0.5
        self.emit(car, t, [40, 600, 420, 820], 0.72, current_zones=["street"])
        self.review(t, "driveway", [car], "detection")
        t += 2.0
        self.emit(car, t, [520, 560, 980, 860], 0.84, current_zones=["driveway"])
        t += 1.5
        plate = ["KX73 ABC", 0.91]
        self.emit(car, t, [700, 540, 1180, 880], 0.88, current_zones=["driveway"], recognized_license_plate=plate)
        t += 20.0
        self.emit(car, t, [702, 541, 1181, 880], 0.87, current_zones=["driveway"], stationary=True, motionless_count=60)
        for minute in range(minutes):  # Frigate's "at least once a minute" for a tracked object, parked or not
            t += 60.0 + self.rng.uniform(0.0, 0.5)
            box = [700 + self.rng.randint(-2, 2), 540 + self.rng.randint(-2, 2), 1181, 880]
            self.emit(
                car,
                t,
                box,
                0.85 + self.rng.uniform(0, 0.03),
                current_zones=["driveway"],
                stationary=True,
                motionless_count=80 + 300 * minute,
            )
        self.api_items.append(self._api_item(car, car.state, None))  # still parked: in progress in the API
        return t

    def cat_in_backyard(self, at: float) -> None:
        cat = self.track("backyard", "cat", at)
        t = at + 1.0
        for index, x in enumerate((100, 300, 500, 700)):
            zones = ["lawn"]
            self.emit(cat, t, [x, 500, x + 90, 560], 0.7 + 0.05 * index, current_zones=zones)
            t += 1.2
        self.end(cat, t)

    def lingering_stranger(self, at: float) -> None:
        person = self.track("backyard", "person", at)
        t = at + 0.7
        self.emit(person, t, [1000, 260, 1090, 520], 0.77, current_zones=["lawn"])
        self.review(t, "backyard", [person], "alert")
        t += 3.0
        self.emit(person, t, [880, 250, 975, 515], 0.83, current_zones=["lawn", "shed"])
        t += 25.0
        self.emit(
            person, t, [882, 251, 977, 515], 0.8, current_zones=["lawn", "shed"], stationary=True, motionless_count=55
        )
        t += 40.0
        self.emit(person, t, [600, 270, 690, 520], 0.86, current_zones=["lawn"], position_changes=2)
        t += 2.0
        self.end(
            person, t, "A person in a dark hoodie stands by the shed door for a minute, then walks towards the gate."
        )

    def malformed(self, at: float) -> None:
        self.publish(at, "frigate/events", '{"type": "new", "before": {"id": "broken')
        ghost = self.track("front_door", "person", at)
        state = ghost.snapshot(at, [10, 10, 50, 90], 0.8)
        self.publish(
            at + 0.1,
            "frigate/events",
            {"type": "new", "before": state, "after": {k: v for k, v in state.items() if k != "camera"}},
        )
        self.publish(
            at + 0.2,
            "frigate/events",
            {"type": "new", "before": state, "after": {**state, "box": [1200, 600, 1400, 800]}},
        )
        self.publish(
            at + 0.3, "frigate/events", {"type": "new", "before": state, "after": {**state, "camera": "attic"}}
        )
        fp = self.track("backyard", "dog", at)
        self.publish(
            at + 0.4,
            "frigate/events",
            {
                "type": "update",
                "before": None,
                "after": {**fp.snapshot(at, [5, 5, 40, 40], 0.3), "false_positive": True},
            },
        )


def frigate_night(
    seed: int = 0, start: datetime = DEFAULT_START, *, malformed: bool = False
) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """(MQTT messages as (topic, payload) in publish order, the `/api/events` items of the same night by start)."""
    night = _Night(seed, start)
    t0 = night.t0
    night.resident_at_door(t0 + 60)
    night.car_parks(t0 + 300, PARKED_MINUTES)
    night.cat_in_backyard(t0 + 600)
    night.lingering_stranger(t0 + 3000)
    if malformed:
        night.malformed(t0 + 4000)
    ordered = sorted(night.messages, key=lambda m: (m[0], m[1]))
    items = sorted(night.api_items, key=lambda item: (item["start_time"], item["id"]))
    return [(topic, payload) for _, _, topic, payload in ordered], items


def mqtt_lines(messages: list[tuple[str, Any]], *, with_topics: bool = False) -> list[str]:
    """One line per payload (a broker dump); `with_topics` prefixes the topic as `mosquitto_sub -v` does."""
    lines = []
    for topic, payload in messages:
        body = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        lines.append(f"{topic} {body}" if with_topics else body)
    return lines


def write_night(
    folder: str | Path, seed: int = 0, start: datetime = DEFAULT_START, *, malformed: bool = False
) -> dict[str, Path]:
    """Write `frigate-night.jsonl` (MQTT payloads), `frigate-events.json` (the API answer) and `frigate.yml`."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    messages, items = frigate_night(seed, start, malformed=malformed)
    paths = {"mqtt": out / "frigate-night.jsonl", "api": out / "frigate-events.json", "config": out / "frigate.yml"}
    paths["mqtt"].write_text("\n".join(mqtt_lines(messages)) + "\n", encoding="utf-8")
    paths["api"].write_text(json.dumps(items, indent=1) + "\n", encoding="utf-8")
    paths["config"].write_text(frigate_config_yaml(), encoding="utf-8")
    return paths
