"""A simulated household fortnight (issue 38's measurement), for bench/household_fortnight.py and its short test.

Three cameras with profiles: `drive` (the driveway, a private zone), `front` (the front door, an entry zone) and
`back` (the back door, an entry zone). Every night the neighbour's car crosses the driveway at 23:30 (the floor's
"vehicle at night", medium) and a resident comes home at 00:45 through the front door with no face recognition
(a person not known at an entry zone at night, high); every day a courier brings a parcel at 14:00 (low). Real
threats are interleaved: a stranger at the back door at 03:00, lingering, and someone trying the car doors on the
driveway at 23:40. A threat is a threat the same way every time (no caption text: closed-vocabulary labels only).

Each batch goes the pipeline's way from its detections on: `steps.context_for_batch` (the camera's profile), the
stored context (`save_context`), the floor of `evaluation/stored_floor.batch_floor` (what the `risk_assessments`
asset calls: the EVIDENCE_* rules, the household exceptions in force at the moment of judgement) and the verdict
stored with that floor. The verdicts are floor-only: the model is not what is measured here (the exceptions lift
floor rules only; the model's trust is the model-trust issue's), and the history facts are off (no detection tables).

With a broker, the household corrects as a user would, through a real mosquitto: after the neighbour's car it
presses Home Assistant's "false alarm" button of the driveway (the discovery's `command_topic` and `payload_press`,
acting on the camera's latest verdict), after the resident a notification action sends
`{"batch_id", "level": "low", "note"}` to `<prefix>/front/correction` (each only when the verdict was an alarm:
medium or above), and it confirms the back-door stranger with the "real threat" button; the verdict publisher's
session (sensors/verdict_publisher.py `publish_pending`) stores them on its next tick. Without a broker nothing is
corrected: the "before corrections" run.

Simulated time runs from `start` (a past midnight, UTC): the publisher, the corrections and the floor see it, so
"exceptions in force" means in force at the simulated moment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.core.verdict.exceptions import ExceptionPolicy, HouseholdException, Ineligible
from hsi_dagster.evaluation.stored_floor import batch_floor
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.mqtt import MqttPublisherResource
from hsi_dagster.sensors.verdict_publisher import publish_pending
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.steps import context_for_batch
from hsi_dagster.storage.corrections import corrections
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.exceptions import household_exceptions
from hsi_dagster.storage.pipeline_tables import save_assessment, save_context
from tests.support.mosquitto import Mosquitto

PROFILES = {
    "drive": CameraProfile(camera_id="drive", zones=["driveway", "street"], private_zones=["driveway"]),
    "front": CameraProfile(camera_id="front", zones=["door", "path"], entry_zones=["door"]),
    "back": CameraProfile(camera_id="back", zones=["back_door", "garden"], entry_zones=["back_door"]),
}
ALARM_LEVELS = ("medium", "high", "critical")  # a harmless event stored at these is a false alarm
THREAT_LEVELS = ("high", "critical")
STRANGER_NIGHTS = frozenset({3, 7, 11, 14})  # 1-based nights with a stranger at the back door at 03:00
CAR_DOOR_NIGHTS = frozenset({5, 10, 13})  # ... with someone trying the car doors at 23:40


@dataclass(frozen=True)
class Event:
    """One batch of the fortnight: what happened, when, and how the household corrects it (if it does)."""

    name: str  # "neighbour's car", "resident, no face", "delivery", "stranger at the back door", "car doors tried"
    threat: bool
    night: int
    camera_id: str
    start: datetime
    label: str
    zone: str
    frames: int
    seconds_apart: float
    enrichment: dict[str, Any] = field(default_factory=dict)
    correction: str | None = None  # "button:false_alarm", "button:real_threat", "notification:low"

    @property
    def batch_id(self) -> str:
        return f"{self.camera_id}-n{self.night:02d}-{self.start:%H%M}"

    def detections(self) -> list[dict[str, Any]]:
        return [
            {
                "detection_id": f"{self.batch_id}-{n}",
                "ts": (self.start + timedelta(seconds=self.seconds_apart * n)).isoformat(),
                "camera_id": self.camera_id,
                "label": self.label,
                "confidence": 0.86,
                "zone": self.zone,
                "track_id": f"{self.batch_id}-t",
                "enrichment": dict(self.enrichment),
            }
            for n in range(self.frames)
        ]

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds_apart * (self.frames - 1))


def fortnight_events(start: datetime, nights: int) -> list[Event]:
    """The events of `nights` nights from `start` (a midnight), in time order; night n runs from its 12:00 on."""
    events = []
    for n in range(1, nights + 1):
        day = start + timedelta(days=n - 1)
        events += [
            Event("delivery", False, n, "front", day + timedelta(hours=14), "person", "door", 3, 5.0),
            Event(
                "neighbour's car",
                False,
                n,
                "drive",
                day + timedelta(hours=23, minutes=30),
                "car",
                "driveway",
                4,
                5.0,
                correction="button:false_alarm",
            ),
            Event(
                "resident, no face",
                False,
                n,
                "front",
                day + timedelta(hours=24, minutes=45),
                "person",
                "door",
                3,
                4.0,
                correction="notification:low",
            ),
        ]
        if n in CAR_DOOR_NIGHTS:
            trying = {"action": {"label": "trying car doors", "score": 0.8}}
            events.append(
                Event(
                    "car doors tried",
                    True,
                    n,
                    "drive",
                    day + timedelta(hours=23, minutes=40),
                    "person",
                    "driveway",
                    4,
                    5.0,
                    trying,
                )
            )
        if n in STRANGER_NIGHTS:
            events.append(
                Event(
                    "stranger at the back door",
                    True,
                    n,
                    "back",
                    day + timedelta(hours=27),
                    "person",
                    "back_door",
                    7,
                    15.0,
                    correction="button:real_threat",
                )
            )
    return sorted(events, key=lambda e: e.start)


@dataclass
class Judged:
    event: Event
    level: str
    score: int
    reasons: tuple[str, ...]


@dataclass
class Fortnight:
    judged: list[Judged]
    exceptions: list[HouseholdException]
    refused: list[Ineligible]
    corrections: list[dict[str, Any]]
    refusals: list[str]

    def nights(self) -> list[int]:
        return sorted({j.event.night for j in self.judged})

    def false_alarms(self, night: int, name: str | None = None) -> int:
        return sum(
            1
            for j in self.judged
            if j.event.night == night
            and not j.event.threat
            and j.level in ALARM_LEVELS
            and (name is None or j.event.name == name)
        )

    def threats(self, night: int) -> list[Judged]:
        return [j for j in self.judged if j.event.night == night and j.event.threat]


def settings_for(db: Path, **overrides: str) -> HsiSettings:
    return load_settings(env_file=os.devnull, HSI_DUCKDB_PATH=str(db), **overrides)


class Household:
    """The household's side of Home Assistant: presses buttons and sends notification actions as QoS 1 messages."""

    def __init__(self, broker: Mosquitto, prefix: str = "hsi") -> None:
        import paho.mqtt.client as mqtt

        self.prefix = prefix
        self.buttons: dict[tuple[str, str], dict[str, Any]] = {}
        self.broker = broker
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="household-phone", protocol=mqtt.MQTTv5)
        self.client.on_message = self._discovered
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("homeassistant/button/#", qos=1)
        self.client.connect("127.0.0.1", broker.port)
        self.client.loop_start()

    def _discovered(self, client: Any, userdata: Any, message: Any) -> None:
        parts = message.topic.split("/")  # homeassistant/button/hsi_<camera>/<button>/config
        if len(parts) == 5 and message.payload:
            self.buttons[(parts[2], parts[3])] = json.loads(message.payload)

    def press(self, camera_id: str, button: str) -> None:
        config = self._button(camera_id, button)
        self._send(config["command_topic"], config["payload_press"])

    def notification_action(self, camera_id: str, batch_id: str, level: str, note: str) -> None:
        payload = json.dumps({"batch_id": batch_id, "level": level, "note": note})
        self._send(f"{self.prefix}/{camera_id}/correction", payload)

    def _button(self, camera_id: str, button: str, timeout: float = 10.0) -> dict[str, Any]:
        import time

        deadline = time.monotonic() + timeout
        while (f"hsi_{camera_id}", button) not in self.buttons:
            if time.monotonic() > deadline:
                raise AssertionError(f"no Home Assistant button {button!r} discovered for camera {camera_id!r}")
            time.sleep(0.02)
        return self.buttons[(f"hsi_{camera_id}", button)]

    def _send(self, topic: str, payload: str) -> None:
        self.client.publish(topic, payload, qos=1, retain=False).wait_for_publish(timeout=5)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def judge(db: Path, event: Event, settings: HsiSettings, at: datetime) -> Judged:
    """The batch the pipeline's way: its context and the floor-only verdict judged at `at`, both stored."""
    batch = {
        "batch_id": event.batch_id,
        "camera_id": event.camera_id,
        "started_at": event.start.isoformat(),
        "last_ts": event.end.isoformat(),
        "close_reason": "window",
    }
    context = context_for_batch(batch, event.detections(), settings, camera_profile=PROFILES[event.camera_id])
    with connect(db) as conn:
        save_context(conn, event.batch_id, context.to_json(), settings.ENRICHMENT_QUALITY_LEVEL, [])
        floor, _ = batch_floor(conn, event.batch_id, event.camera_id, settings, PROFILES, now=at)
        save_assessment(
            conn,
            {
                "batch_id": event.batch_id,
                "camera_id": event.camera_id,
                "risk_score": floor.score,
                "risk_level": floor.level,
                "summary": f"{event.camera_id}: {floor.level} ({'; '.join(floor.reasons) or 'no rule fired'})",
                "reasoning": "floor-only verdict (bench/household_fortnight.py: the model is not measured)",
                "status": "ok",
                "model": "evidence floor",
                "floor_score": floor.score,
                "floor_reasons": list(floor.reasons),
                "assessed_at": at,
            },
        )
    return Judged(event, floor.level, floor.score, floor.reasons)


def run_fortnight(
    db: Path,
    nights: int,
    start: datetime,
    broker: Mosquitto | None,
    settings: HsiSettings | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Fortnight:
    """Judge every event of `nights` nights in time order; with a broker, the household corrects over MQTT."""
    settings = settings or settings_for(db)
    database = HsiDuckDBResource(database=str(db))
    mqtt = (
        MqttPublisherResource(enabled=True, host="127.0.0.1", port=broker.port, connect_timeout_seconds=5)
        if broker
        else None
    )
    household = Household(broker) if broker else None
    judged, refusals = [], []

    def tick(at: datetime) -> None:
        assert mqtt is not None
        report = publish_pending(
            database, mqtt, None, now=lambda: at, corrections_per_hour=settings.CORRECTIONS_PER_CAMERA_PER_HOUR
        )
        if report.error:
            raise AssertionError(f"the verdict publisher failed at {at}: {report.error}")
        refusals.extend(report.commands.refused)

    try:
        for event in fortnight_events(start, nights):
            at = event.end + timedelta(seconds=30)  # the batch window closes, the verdict is judged
            judged.append(judge(db, event, settings, at))
            if household is None:
                continue
            tick(at + timedelta(seconds=30))  # the verdict reaches Home Assistant (and its buttons exist)
            if event.correction is None or (not event.threat and judged[-1].level not in ALARM_LEVELS):
                continue  # nothing to correct: a harmless event that raised no alarm
            way, what = event.correction.split(":")
            if way == "button":
                household.press(event.camera_id, what)
            else:
                household.notification_action(event.camera_id, event.batch_id, what, f"{event.name}: harmless")
            tick(at + timedelta(minutes=2))  # the next tick stores it
            progress(f"night {event.night}: {event.name} {judged[-1].level}, corrected ({event.correction})")
    finally:
        if household is not None:
            household.close()
    end = start + timedelta(days=nights + 1)
    with connect(db, read_only=True) as conn:
        rules, policy = EvidenceRules.from_settings(settings), ExceptionPolicy.from_settings(settings)
        exceptions, refused, _ = household_exceptions(conn, rules, policy, end)
        stored = corrections(conn, limit=1000)
    return Fortnight(judged, exceptions, refused, stored, refusals)


def fortnight_start(nights: int, now: datetime | None = None) -> datetime:
    """A past midnight (UTC) so the whole run is over `now`: corrections and exceptions are in force when used."""
    now = now or datetime.now(UTC)
    return datetime(now.year, now.month, now.day, tzinfo=UTC) - timedelta(days=nights + 2)
