"""`hsi frigate listen` against a real MQTT broker (Debian's mosquitto, started here on 127.0.0.1 with persistence):
a recorded Frigate night is published with paho (new objects, updates, a parked car's periodic updates, a
recognised face, zones, GenAI descriptions, reviews, malformed payloads), the broker is restarted in the middle,
and the listener is killed while it holds unwritten messages. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.batches import list_batches
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import import_frigate_files
from hsi_dagster.storage.frigate_config import load_detect_resolutions
from hsi_dagster.synthetic.frigate import PARKED_MINUTES, frigate_config_yaml, frigate_night, mqtt_lines
from tests.support.mosquitto import Mosquitto, running_broker

pytestmark = pytest.mark.timeout(240)
SUBSCRIBED = ("frigate/events", "frigate/tracked_object_update", "frigate/reviews")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running_broker(tmp_path / "broker") as server:
        yield server


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Listener:
    """`hsi frigate listen` as a subprocess, configured through the environment as in production."""

    def __init__(self, tmp_path: Path, broker: Mosquitto, client_id: str, **env: str) -> None:
        self.status_file = tmp_path / f"status-{uuid.uuid4().hex[:6]}.json"
        self.log = tmp_path / f"listen-{uuid.uuid4().hex[:6]}.log"
        self.db = tmp_path / "hsi.duckdb"
        config = tmp_path / "frigate.yml"
        config.write_text(frigate_config_yaml(), encoding="utf-8")
        environment = {
            **os.environ,
            "HSI_ENV_FILE": str(tmp_path / "no.env"),
            "MQTT_HOST": "127.0.0.1",
            "MQTT_PORT": str(broker.port),
            "MQTT_CLIENT_ID": client_id,
            "FRIGATE_CONFIG_PATH": str(config),
            "FRIGATE_BATCH_SIZE": "10",
            "FRIGATE_BATCH_SECONDS": "0.3",
            **env,
        }
        command = [sys.executable, "-m", "hsi_dagster.cli.main", "frigate", "listen", "--db", str(self.db)]
        command += ["--status-file", str(self.status_file)]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command, cwd=tmp_path, env=environment, stdout=log, stderr=subprocess.STDOUT
            )

    def status(self) -> dict[str, Any]:
        if self.process.poll() is not None:
            raise AssertionError(f"the listener exited with {self.process.returncode}: {self.output()}")
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=30)


def publish(broker: Mosquitto, messages: list[tuple[str, Any]], timeout: float = 30.0) -> None:
    """QoS 1 from a paho client; returns once the broker acknowledged every message."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"frigate-{uuid.uuid4().hex[:8]}")
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.connect("127.0.0.1", broker.port, keepalive=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    client.loop_start()
    try:
        for topic, body in zip((t for t, _ in messages), mqtt_lines(messages), strict=True):
            client.publish(topic, body, qos=1).wait_for_publish(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        client.disconnect()
        client.loop_stop()


def tables(db: Path) -> dict[str, list[tuple]]:
    with connect(db, read_only=True) as conn:
        return {
            "detections": conn.execute(
                "SELECT detection_id, camera_id, ts, label, confidence, bbox, track_id, zone, enrichment::VARCHAR "
                "FROM detections ORDER BY detection_id"
            ).fetchall(),
            "quarantine": conn.execute(
                "SELECT source, line_no, raw, reason FROM quarantine ORDER BY line_no"
            ).fetchall(),
            "sources": conn.execute("SELECT * EXCLUDE (updated_at) FROM frigate_sources").fetchall(),
            "reviews": conn.execute(
                "SELECT review_id, camera_id, start_time, severity, objects FROM frigate_reviews ORDER BY review_id"
            ).fetchall(),
        }


def test_listen_stores_a_night_through_a_broker_restart(tmp_path: Path, broker: Mosquitto) -> None:
    messages, _ = frigate_night(seed=5, malformed=True)
    subscribed = [m for m in messages if m[0] in SUBSCRIBED]
    assert any(m[0] == "frigate/reviews" for m in subscribed)  # review items are subscribed to
    listener = Listener(tmp_path, broker, "hsi-test-restart")
    wait_for(lambda: listener.status().get("connected"), 30, "the listener to connect")
    middle = len(messages) // 2
    first_half = [m for m in messages[:middle] if m[0] in SUBSCRIBED]
    publish(broker, messages[:middle])
    wait_for(lambda: listener.status().get("written") == len(first_half), 60, "the first half to be written")

    broker.restart()  # the listener's session and subscriptions are in the broker's persistence file
    publish(broker, messages[middle:])  # queued by the broker for the listener while it reconnects
    wait_for(lambda: listener.status().get("written", 0) >= len(subscribed), 90, "the second half to be written")
    status = listener.status()
    assert status["connects"] >= 2 and status["received"] == len(subscribed), status
    assert listener.stop() == 0, listener.output()
    assert "resumed session" in listener.output()

    stored = tables(listener.db)
    # the same payloads imported from a file give exactly the same detections: one mapping, whatever the transport
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(mqtt_lines(subscribed)) + "\n")
    reference = tmp_path / "reference.duckdb"
    import_frigate_files(reference, [dump], resolutions=load_detect_resolutions(tmp_path / "frigate.yml").by_camera)
    assert stored["detections"] == tables(reference)["detections"]
    assert stored["reviews"] == tables(reference)["reviews"] and stored["reviews"]  # Frigate's review items kept

    detections = stored["detections"]
    cars = [d for d in detections if d[3] == "car"]
    assert len(cars) == 4, [d[0] for d in cars]  # new, zones, plate, parked; none of its PARKED_MINUTES updates
    assert any('"identity":"alice"' in d[8] and d[1] == "front_door" for d in detections)  # a recognised face
    assert any(d[7] == "lawn,shed" for d in detections)  # zones
    captions = [d for d in detections if ":description:" in d[0]]
    assert len(captions) == 2 and all('"caption"' in d[8] for d in captions)

    source = f"mqtt://127.0.0.1:{broker.port}/frigate"
    quarantine = stored["quarantine"]
    assert [row[0] for row in quarantine] == [source] * 4
    assert sorted(row[3].split(":", 1)[0] for row in quarantine) == [
        "after.box",
        "after.camera",
        "after.camera",
        "payload",
    ]
    assert len({row[1] for row in quarantine}) == 4 and all(row[2] for row in quarantine)

    (tally,) = stored["sources"]
    names = ["source", "messages", "detections", "duplicates", "false_positives", "unchanged", "ignored", "quarantined"]
    tallies = dict(zip(names, tally, strict=True))
    assert tallies["messages"] == len(subscribed) and tallies["detections"] == len(detections)
    assert tallies["false_positives"] == 1 and tallies["quarantined"] == 4
    assert tallies["unchanged"] >= PARKED_MINUTES  # the parked car's minute-by-minute updates, counted

    settings = load_settings(tmp_path / "no.env")
    with connect(listener.db, read_only=True) as conn:
        batches = list_batches(conn, BatchRules.from_settings(settings), datetime(2100, 1, 1, tzinfo=UTC))
    driveway = [b for b in batches if b["camera_id"] == "driveway"]
    # one arrival: without the state policy each periodic update of the parked car would open a batch of its own
    assert len(driveway) == 1 and len(driveway[0]["detection_ids"]) == 4, driveway
    assert sum(len(b["detection_ids"]) for b in batches) == len(detections)


def test_a_listener_killed_before_writing_loses_nothing(tmp_path: Path, broker: Mosquitto) -> None:
    messages, _ = frigate_night(seed=9)
    subscribed = [m for m in messages if m[0] in SUBSCRIBED][:30]
    slow = Listener(tmp_path, broker, "hsi-test-crash", FRIGATE_BATCH_SIZE="1000", FRIGATE_BATCH_SECONDS="600")
    wait_for(lambda: slow.status().get("connected"), 30, "the listener to connect")
    publish(broker, subscribed)
    status = wait_for(lambda: (s := slow.status()).get("received") == len(subscribed) and s, 30, "all received")
    assert status["written"] == 0 and status["acknowledged"] == 0  # held in memory, unacknowledged
    slow.stop(signal.SIGKILL)
    assert not slow.db.exists() or not tables(slow.db)["detections"]

    again = Listener(tmp_path, broker, "hsi-test-crash")  # same client id: the broker redelivers
    wait_for(lambda: again.status().get("written", 0) >= len(subscribed), 60, "the redelivered messages")
    assert again.stop() == 0, again.output()
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(mqtt_lines(subscribed)) + "\n")
    reference = tmp_path / "reference.duckdb"
    import_frigate_files(reference, [dump], resolutions=load_detect_resolutions(tmp_path / "frigate.yml").by_camera)
    expected = tables(reference)["detections"]
    assert expected and tables(again.db)["detections"] == expected
