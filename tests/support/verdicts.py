"""Helpers for the verdict publisher's tests: stored verdicts, a recording MQTT subscriber, a broker with passwords."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hsi_dagster.core.prompt.risk_schema import level_for_score
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.mqtt import MqttPublisherResource
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import save_assessment
from tests.support.mosquitto import Mosquitto


def save_verdict(
    db: Path,
    batch_id: str,
    camera_id: str,
    score: int,
    assessed_at: datetime,
    summary: str | None = None,
    **columns: Any,
) -> None:
    """A stored verdict (status `ok` unless `columns` say otherwise), as the risk_assessments asset writes it."""
    with connect(db) as conn:
        save_assessment(
            conn,
            {
                "batch_id": batch_id,
                "camera_id": camera_id,
                "risk_score": score,
                "risk_level": level_for_score(score),
                "summary": summary if summary is not None else f"{camera_id}: verdict {batch_id}",
                "reasoning": "test",
                "assessment": {"risk_factors": [{"factor_name": "test factor", "contribution": 10}]},
                "status": "ok",
                "assessed_at": assessed_at,
                **columns,
            },
        )


def publisher(port: int, **overrides: Any) -> MqttPublisherResource:
    """The publisher resource for a broker on 127.0.0.1:`port`."""
    values: dict[str, Any] = {"enabled": True, "host": "127.0.0.1", "port": port, "connect_timeout_seconds": 5}
    values.update(overrides)
    return MqttPublisherResource(**values)


def database(db: Path) -> HsiDuckDBResource:
    return HsiDuckDBResource(database=str(db))


@dataclass(frozen=True)
class Received:
    topic: str
    payload: bytes
    retain: bool

    def json(self) -> Any:
        return json.loads(self.payload)


class Recorder:
    """A subscriber to `topic` (QoS 1, persistent session so nothing is missed across a broker restart) that keeps
    every message it receives, in order."""

    def __init__(self, broker: Mosquitto, topic: str = "#", client_id: str = "test-recorder") -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        self.messages: list[Received] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *args: self._subscribed.set()
        self.client.reconnect_delay_set(1, 2)
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600
        self.client.connect("127.0.0.1", broker.port, clean_start=False, properties=properties)
        self.client.loop_start()
        assert self._subscribed.wait(15), "the recorder could not subscribe"

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            self.messages.append(Received(message.topic, bytes(message.payload), bool(message.retain)))

    def on(self, suffix: str) -> list[Received]:
        with self._lock:
            return [m for m in self.messages if m.topic.endswith(suffix)]

    def wait(self, predicate: Callable[[Recorder], bool], timeout: float = 30.0, what: str = "messages") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; got {[(m.topic, m.payload[:80]) for m in self.messages]}")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def retained(broker: Mosquitto, topic: str, wait_seconds: float = 2.0) -> dict[str, bytes]:
    """What the broker holds retained under `topic` (a filter), read by a fresh clean subscriber."""
    import paho.mqtt.client as mqtt

    found: dict[str, bytes] = {}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-retained", protocol=mqtt.MQTTv5)
    client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
    client.on_message = lambda c, u, m: found.__setitem__(m.topic, bytes(m.payload)) if m.retain else None
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    time.sleep(wait_seconds)
    client.disconnect()
    client.loop_stop()
    return found


class PasswordMosquitto(Mosquitto):
    """The test broker with `allow_anonymous false` and one user in a password file (mosquitto_passwd)."""

    def __init__(self, folder: Path, username: str, password: str) -> None:
        super().__init__(folder)
        passwords = folder / "passwords"
        subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), username, password], check=True, timeout=30)
        text = self.config.read_text(encoding="utf-8").replace("allow_anonymous true", "allow_anonymous false")
        self.config.write_text(text + f"password_file {passwords}\n", encoding="utf-8")
