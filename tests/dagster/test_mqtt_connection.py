"""The one MQTT client set-up (resources/mqtt_connection.py) against a real mosquitto that checks a password: the
credentials get in (and wrong ones are refused), the client speaks MQTT 5 (a DISCONNECT with reason code 0x04 has
the broker publish the will, a v5-only feature) and TLS reads the CA file it is given."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hsi_dagster.resources.mqtt_connection import MqttWill, mqtt_client
from tests.support.mosquitto import Mosquitto
from tests.support.verdicts import PasswordMosquitto


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    server = PasswordMosquitto(tmp_path / "broker", "hsi", "right")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def connect(client: Any, broker: Mosquitto) -> Any:
    """Connect and return the broker's CONNACK reason code."""
    answered = threading.Event()
    reasons: list[Any] = []
    client.on_connect = lambda c, u, f, reason, p: (reasons.append(reason), answered.set())
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    assert answered.wait(15), "no CONNACK"
    return reasons[0]


def test_credentials_get_in_and_the_v5_will_is_published(broker: Mosquitto) -> None:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.reasoncodes import ReasonCode

    watcher = mqtt_client("test-watcher", username="hsi", password="right")
    assert not connect(watcher, broker).is_failure
    got: list[tuple[str, bytes, bool]] = []
    arrived, subscribed = threading.Event(), threading.Event()
    watcher.on_subscribe = lambda *args: subscribed.set()
    watcher.on_message = lambda c, u, m: (got.append((m.topic, bytes(m.payload), bool(m.retain))), arrived.set())
    watcher.subscribe("hsi/availability", qos=1)
    assert subscribed.wait(15)

    client = mqtt_client(
        "test-publisher", username="hsi", password="right", will=MqttWill("hsi/availability", "offline")
    )
    assert not connect(client, broker).is_failure
    client.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=4))  # "with will message": MQTT 5
    assert arrived.wait(15), "the broker did not publish the will"
    assert got[0][:2] == ("hsi/availability", b"offline")
    client.loop_stop()
    watcher.disconnect()
    watcher.loop_stop()


def test_wrong_or_missing_credentials_are_refused(broker: Mosquitto) -> None:
    for client in (mqtt_client("test-wrong", username="hsi", password="wrong"), mqtt_client("test-anonymous")):
        reason = connect(client, broker)
        client.loop_stop()
        assert reason.is_failure and reason.value in (0x86, 0x87)  # bad user name or password / not authorized


def test_tls_reads_the_ca_file_it_is_given(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises((OSError, ValueError)):
        mqtt_client("test-tls", tls=True, ca_file=str(missing))
    assert mqtt_client("test-plain", tls=False, ca_file=str(missing)) is not None  # no TLS: the file is not read


def test_a_will_is_never_published_after_a_clean_disconnect(broker: Mosquitto) -> None:
    watcher = mqtt_client("test-watcher-2", username="hsi", password="right")
    assert not connect(watcher, broker).is_failure
    got: list[bytes] = []
    subscribed = threading.Event()
    watcher.on_subscribe = lambda *args: subscribed.set()
    watcher.on_message = lambda c, u, m: got.append(bytes(m.payload))
    watcher.subscribe("hsi/clean", qos=1)
    assert subscribed.wait(15)
    client = mqtt_client("test-clean", username="hsi", password="right", will=MqttWill("hsi/clean", "offline"))
    assert not connect(client, broker).is_failure
    client.disconnect()
    client.loop_stop()
    marker = mqtt_client("test-marker", username="hsi", password="right")
    assert not connect(marker, broker).is_failure
    marker.publish("hsi/clean", b"marker", qos=1).wait_for_publish(15)
    marker.disconnect()
    marker.loop_stop()
    pause = threading.Event()
    for _ in range(150):  # the marker comes after anything the disconnect caused
        if got:
            break
        pause.wait(0.1)
    watcher.disconnect()
    watcher.loop_stop()
    assert got == [b"marker"]  # the will did not come before the marker: a clean disconnect discards it
