"""The household's corrections over MQTT against a real mosquitto (tests/support/mosquitto.py): the Home Assistant
buttons' discovery, a press queued by the broker between two publisher ticks and stored once, every bad input
refused by field and counted (visible in `hsi mqtt status`), and a flood bounded per camera."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.sensors.verdict_publisher import publish_pending
from hsi_dagster.storage.corrections import corrections, refusal_counts
from hsi_dagster.storage.db import connect
from tests.support.mosquitto import Mosquitto, running_broker
from tests.support.verdicts import database, publisher, retained, save_verdict


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running_broker(tmp_path / "broker") as server:
        yield server


def send(broker: Mosquitto, *messages: tuple[str, bytes | str], retain: bool = False) -> None:
    """Publish as Home Assistant or an automation would (QoS 1), waiting for each PUBACK."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-household", protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    try:
        for topic, payload in messages:
            client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(timeout=5)
    finally:
        client.disconnect()
        client.loop_stop()


def stored(db: Path) -> list[dict]:
    with connect(db, read_only=True) as conn:
        return corrections(conn)


def refused(db: Path) -> dict[str, int]:
    with connect(db, read_only=True) as conn:
        return {row["field"]: row["refused"] for row in refusal_counts(conn) if row["source"] == "mqtt"}


def test_a_button_press_between_ticks_is_stored_once_and_bad_input_is_refused_by_field(
    tmp_path: Path, broker: Mosquitto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "hsi.duckdb"
    now = datetime.now(UTC)
    save_verdict(db, "yard-1", "yard", 45, now - timedelta(minutes=5))  # medium: the neighbour's car
    save_verdict(db, "yard-2", "yard", 50, now - timedelta(minutes=1))  # the camera's latest
    save_verdict(db, "door-1", "door", 20, now - timedelta(minutes=2))
    first = publish_pending(database(db), publisher(broker.port), None)
    assert first.error is None and first.units == 3

    # Home Assistant's buttons: one per way, publishing to the camera's command topic
    configs = retained(broker, "homeassistant/button/#")
    false_alarm = json.loads(configs["homeassistant/button/hsi_yard/false_alarm/config"])
    real_threat = json.loads(configs["homeassistant/button/hsi_door/real_threat/config"])
    assert false_alarm["command_topic"] == "hsi/yard/correction" and false_alarm["retain"] is False
    assert json.loads(false_alarm["payload_press"])["level"] == "low"
    assert json.loads(real_threat["payload_press"]) == {
        "batch_id": "latest",
        "level": "high",
        "note": "Home Assistant button: Real threat",
    }
    assert false_alarm["availability_topic"] == "hsi/availability"
    assert false_alarm["device"]["identifiers"] == ["hsi_yard"]

    # between two ticks (the publisher is not connected): the broker queues them for the publisher's session
    send(
        broker,
        (false_alarm["command_topic"], false_alarm["payload_press"]),
        (false_alarm["command_topic"], false_alarm["payload_press"]),  # pressed twice: one correction
        ("hsi/yard/correction", json.dumps({"batch_id": "yard-1", "level": "low", "note": "neighbour's car"})),
        ("hsi/yard/correction", b"{not json"),
        ("hsi/yard/correction", json.dumps({"batch_id": "yard-1", "level": "severe"})),
        ("hsi/yard/correction", json.dumps({"batch_id": "yard-9", "level": "low"})),
        ("hsi/yard/correction", json.dumps({"batch_id": "door-1", "level": "low"})),  # another camera's batch
        ("hsi/garage/correction", json.dumps({"batch_id": "yard-1", "level": "low"})),
        ("hsi/yard/correction", json.dumps({"batch_id": "yard-1", "level": "low", "note": "n" * 501})),
        (real_threat["command_topic"], real_threat["payload_press"]),
    )
    second = publish_pending(database(db), publisher(broker.port), None)
    assert second.error is None
    assert (second.commands.stored, second.commands.repeated) == (3, 1)
    assert "corrections: 3 stored, 1 repeats, 6 refused" in second.summary()
    rows = {(r["batch_id"], r["level"]): r for r in stored(db)}
    assert set(rows) == {("yard-2", "low"), ("yard-1", "low"), ("door-1", "high")}
    assert (rows[("yard-2", "low")]["verdict_level"], rows[("yard-2", "low")]["direction"]) == ("medium", "lower")
    assert rows[("yard-1", "low")]["note"] == "neighbour's car" and rows[("yard-1", "low")]["source"] == "mqtt"
    assert refused(db) == {"payload": 1, "level": 1, "batch_id": 1, "camera": 2, "note": 1}

    # acknowledged after storing: the next tick gets nothing again
    third = publish_pending(database(db), publisher(broker.port), None)
    assert (third.commands.stored, third.commands.repeated, third.commands.refused) == (0, 0, [])
    assert len(stored(db)) == 3

    # a retained command counts once, when it is sent; a new subscription never gets it again
    send(broker, ("hsi/door/correction", json.dumps({"batch_id": "door-1", "level": "low"})), retain=True)
    assert publish_pending(database(db), publisher(broker.port), None).commands.stored == 1
    again = publish_pending(database(db), publisher(broker.port, client_id="hsi-verdicts-new"), None)
    assert (again.commands.stored, again.commands.repeated, again.commands.refused) == (0, 0, [])
    assert len(stored(db)) == 4

    # `hsi mqtt status` shows the corrections and the refusals by field
    monkeypatch.setenv("HSI_ENV_FILE", "/dev/null")
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    monkeypatch.setenv("MQTT_PORT", str(broker.port))
    assert main(["mqtt", "status"]) == 0
    out = capsys.readouterr().out
    assert "corrections yard: 2 verdicts corrected (2 lower)" in out
    assert "corrections door: 1 verdicts corrected (1 confirmed)" in out  # its latest correction: low, as stored
    assert "corrections refused (mqtt, level): 1" in out and "'severe' is not one of" in out
    assert "corrections refused (mqtt, camera): 2" in out


def test_a_flood_is_bounded_per_camera(tmp_path: Path, broker: Mosquitto) -> None:
    db = tmp_path / "hsi.duckdb"
    now = datetime.now(UTC)
    for i in range(12):
        save_verdict(db, f"yard-{i}", "yard", 45, now - timedelta(minutes=20 - i))
    save_verdict(db, "door-1", "door", 45, now)
    publish_pending(database(db), publisher(broker.port), None, corrections_per_hour=5)  # the subscription
    flood = [("hsi/yard/correction", json.dumps({"batch_id": f"yard-{i}", "level": "low"})) for i in range(12)]
    send(broker, *flood, ("hsi/door/correction", json.dumps({"batch_id": "door-1", "level": "low"})))
    started = time.monotonic()
    report = publish_pending(database(db), publisher(broker.port), None, corrections_per_hour=5)
    assert time.monotonic() - started < 10
    assert report.commands.stored == 6  # 5 for yard, the door's own bound untouched
    assert sorted(r["batch_id"] for r in stored(db)) == ["door-1", *(f"yard-{i}" for i in range(5))]
    assert refused(db) == {"rate": 7}
    assert all("rate: camera 'yard' had 5 corrections in the last hour" in r for r in report.commands.refused)


def test_the_sensor_tick_takes_corrections_with_the_settings_bound_and_logs_refusals(
    tmp_path: Path, broker: Mosquitto
) -> None:
    import dagster as dg

    from hsi_dagster.resources import PipelineSettingsResource
    from hsi_dagster.sensors import verdict_publisher_sensor
    from hsi_dagster.settings import load_settings

    db = tmp_path / "hsi.duckdb"
    now = datetime.now(UTC)
    for i in range(3):
        save_verdict(db, f"yard-{i}", "yard", 45, now - timedelta(minutes=5 - i))
    settings = load_settings(env_file="/dev/null", HSI_DUCKDB_PATH=str(db), CORRECTIONS_PER_CAMERA_PER_HOUR="2")

    def tick() -> tuple[str, dict]:
        context = dg.build_sensor_context(
            resources={
                "duckdb": database(db),
                "mqtt": publisher(broker.port),
                "pipeline_settings": PipelineSettingsResource.from_settings(settings),
            }
        )
        result = verdict_publisher_sensor(context)
        assert isinstance(result, dg.SkipReason)
        return result.skip_message or "", json.loads(context.cursor or "{}")

    tick()  # discovery, and the session's subscription
    send(broker, *[("hsi/yard/correction", json.dumps({"batch_id": f"yard-{i}", "level": "low"})) for i in range(3)])
    message, cursor = tick()
    assert "corrections: 2 stored, 0 repeats, 1 refused" in message
    assert (cursor["corrections"], cursor["corrections_refused"]) == (2, 1)
    assert refused(db) == {"rate": 1}
