"""verdict_publisher_sensor against a real mosquitto (tests/support/mosquitto.py): Home Assistant discovery, the
retained state per camera, one event per high/critical verdict, nothing twice after a restart, nothing lost while
the broker is down, refused credentials, a camera removed from the configuration, untrusted camera names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.core.outbound.mqtt_messages import HA_STATE_MAX_CHARS, camera_key
from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS
from hsi_dagster.resources import PipelineSettingsResource
from hsi_dagster.resources.mqtt import MqttPublisherResource
from hsi_dagster.sensors import verdict_publisher_sensor
from hsi_dagster.sensors.verdict_publisher import publish_pending
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.db import connect
from tests.support.mosquitto import Mosquitto, free_port, running_broker
from tests.support.verdicts import (
    PasswordMosquitto,
    Recorder,
    database,
    publisher,
    retained,
    save_verdict,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running_broker(tmp_path / "broker") as server:
        yield server


@pytest.fixture
def recorder(broker: Mosquitto) -> Iterator[Recorder]:
    subscriber = Recorder(broker)
    yield subscriber
    subscriber.close()


def now() -> datetime:
    return datetime.now(UTC)


def tick(db: Path, port: int, **resources: object) -> str:
    settings = load_settings(env_file="/dev/null", HSI_DUCKDB_PATH=str(db))
    context = dg.build_sensor_context(
        resources={
            "duckdb": database(db),
            "mqtt": resources.pop("mqtt", publisher(port)),
            "pipeline_settings": PipelineSettingsResource.from_settings(settings),
        }
    )
    result = verdict_publisher_sensor(context)
    assert isinstance(result, dg.SkipReason)
    return result.skip_message or ""


def published(db: Path) -> int:
    with connect(db, read_only=True) as conn:
        return len(conn.execute("SELECT message_key FROM mqtt_outbox").fetchall())


def events(recorder: Recorder, camera: str) -> list[dict]:
    return [m.json() for m in recorder.on(f"hsi/{camera}/event")]


def test_discovery_state_and_one_event_per_high_or_critical_verdict(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    db = tmp_path / "hsi.duckdb"
    start = now() - timedelta(minutes=10)
    for i, score in enumerate([10, 70, 40, 90]):  # yard: low, high, medium, critical
        save_verdict(db, f"yard-{i}", "yard", score, start + timedelta(minutes=i))
    save_verdict(db, "door-0", "door", 40, start)

    print(tick(db, broker.port))
    recorder.wait(lambda r: len(r.on("/state")) >= 2 and len(r.on("/event")) >= 2, what="states and events")

    # Home Assistant discovery: one device per camera, four entities, retained (fields: core/outbound/mqtt_messages.py
    # cites the Home Assistant pages they were checked against)
    configs = retained(broker, "homeassistant/#")
    for camera in ("yard", "door"):
        level = json.loads(configs[f"homeassistant/sensor/hsi_{camera}/risk_level/config"])
        assert level["device_class"] == "enum" and level["options"] == list(RISK_LEVELS)
        assert level["state_topic"] == f"hsi/{camera}/state" and level["value_template"] == "{{ value_json.level }}"
        assert level["availability_topic"] == "hsi/availability"
        assert level["payload_available"] == "online" and level["payload_not_available"] == "offline"
        assert level["device"]["identifiers"] == [f"hsi_{camera}"]
        score = json.loads(configs[f"homeassistant/sensor/hsi_{camera}/risk_score/config"])
        assert score["state_class"] == "measurement" and score["value_template"] == "{{ value_json.score }}"
        summary = json.loads(configs[f"homeassistant/sensor/hsi_{camera}/last_summary/config"])
        assert summary["value_template"] == "{{ value_json.summary }}"
        threat = json.loads(configs[f"homeassistant/binary_sensor/hsi_{camera}/threat/config"])
        assert (threat["payload_on"], threat["payload_off"], threat["device_class"]) == ("ON", "OFF", "safety")
        ids = {json.loads(configs[t])["unique_id"] for t in configs if f"/hsi_{camera}/" in t}
        assert len(ids) == 6  # 4 entities, 2 correction buttons
    assert retained(broker, "hsi/availability") == {"hsi/availability": b"online"}

    # retained state per camera: the newest verdict
    states = retained(broker, "hsi/+/state")
    yard, door = json.loads(states["hsi/yard/state"]), json.loads(states["hsi/door/state"])
    assert (yard["level"], yard["score"], yard["threat"], yard["batch_id"]) == ("critical", 90, "ON", "yard-3")
    assert yard["reasons"] == ["test factor"]
    assert (door["level"], door["threat"]) == ("medium", "OFF")

    # one event per high/critical verdict, in order; none for door
    assert [(e["event_id"], e["level"]) for e in events(recorder, "yard")] == [
        ("verdict:yard-1", "high"),
        ("verdict:yard-3", "critical"),
    ]
    assert events(recorder, "door") == []
    assert all(not m.retain for m in recorder.on("/event"))

    # a second tick sends nothing again
    before = len(recorder.messages)
    assert "0 verdicts/alerts published" in tick(db, broker.port)
    save_verdict(db, "yard-4", "yard", 75, start + timedelta(minutes=5))
    tick(db, broker.port)
    recorder.wait(lambda r: len(events(r, "yard")) == 3, what="the third yard event")
    assert [m.topic for m in recorder.messages[before:] if m.topic.startswith("hsi/yard")] == [
        "hsi/yard/event",
        "hsi/yard/state",
    ]


def test_nothing_lost_while_the_broker_is_down_and_sent_in_order_when_it_returns(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    db = tmp_path / "hsi.duckdb"
    start = now() - timedelta(minutes=30)
    save_verdict(db, "a-0", "yard", 80, start)
    tick(db, broker.port)
    recorder.wait(lambda r: len(events(r, "yard")) == 1, what="the first event")

    broker.stop()
    for i in range(1, 7):  # verdicts stored while the broker is down, two cameras interleaved
        save_verdict(db, f"a-{i}", "yard", 60 + i, start + timedelta(minutes=i))
        save_verdict(db, f"b-{i}", "door", 85 + i, start + timedelta(minutes=i, seconds=30))
    for _ in range(2):
        reason = tick(db, broker.port)
        assert "the connection failed: refused" in reason, reason
    assert published(db) == 1

    broker.start()
    recorder.wait(lambda r: r.client.is_connected(), what="the recorder to reconnect")
    tick(db, broker.port)
    recorder.wait(lambda r: len(events(r, "yard")) == 7 and len(events(r, "door")) == 6, what="the backlog")
    assert [e["event_id"] for e in events(recorder, "yard")] == [f"verdict:a-{i}" for i in range(7)]
    assert [e["event_id"] for e in events(recorder, "door")] == [f"verdict:b-{i}" for i in range(1, 7)]
    assert json.loads(retained(broker, "hsi/yard/state")["hsi/yard/state"])["batch_id"] == "a-6"


HARNESS = """
import os, signal, sys
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.mqtt import MqttPublisherResource
from hsi_dagster.sensors import verdict_publisher as vp
from hsi_dagster.storage import mqtt_outbox

db, port, ticks_before_kill, kill_before_commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
mqtt = MqttPublisherResource(enabled=True, port=port)
if kill_before_commit:  # fault injection: die after the broker acknowledged a group, before its outbox commit
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    mqtt_outbox.record_published = die
for number in range(1000):
    if number == ticks_before_kill:
        os.kill(os.getpid(), signal.SIGKILL)  # fault injection: the process dies mid-stream, between ticks
    report = vp.publish_pending(HsiDuckDBResource(database=db), mqtt, None, limit=5)
    print(report.summary(), flush=True)
    if report.units == 0 and not report.error:
        break
"""


def run_harness(db: Path, broker: Mosquitto, ticks_before_kill: int, kill_before_commit: bool = False) -> int:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HARNESS), str(db), str(broker.port), str(ticks_before_kill)]
        + ["1" if kill_before_commit else "0"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode


def test_killed_and_restarted_mid_stream_publishes_nothing_twice_and_skips_nothing(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    db = tmp_path / "hsi.duckdb"
    start = now() - timedelta(minutes=40)
    for i in range(30):
        save_verdict(db, f"v-{i:02d}", "yard" if i % 2 else "door", 70 + i % 30, start + timedelta(minutes=i))
    # 5 verdicts per tick: killed (SIGKILL) after 3 ticks, then a new process finishes the stream
    assert run_harness(db, broker, ticks_before_kill=3) == -signal.SIGKILL
    done = published(db)
    assert 0 < done < 30, "the kill was not mid-stream"
    assert run_harness(db, broker, ticks_before_kill=-1) == 0
    recorder.wait(lambda r: len(r.on("/event")) >= 30, what="30 events")
    ids = [m.json()["event_id"] for m in recorder.on("/event")]
    assert sorted(ids) == sorted(f"verdict:v-{i:02d}" for i in range(30))  # each once: no repeat, none skipped
    for camera in ("yard", "door"):
        mine = [e["event_id"] for e in events(recorder, camera)]
        assert mine == sorted(mine), f"{camera}: events out of order"


def test_a_kill_between_the_brokers_acknowledgement_and_the_outbox_commit_repeats_only_that_group(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    """The one window left (documented in the sensor's docstring): the repeat carries the same event_id."""
    db = tmp_path / "hsi.duckdb"
    start = now() - timedelta(minutes=20)
    for i in range(8):
        save_verdict(db, f"w-{i}", "yard", 90, start + timedelta(minutes=i))
    assert run_harness(db, broker, ticks_before_kill=-1, kill_before_commit=True) == -signal.SIGKILL
    assert run_harness(db, broker, ticks_before_kill=-1) == 0
    recorder.wait(lambda r: len({e["event_id"] for e in events(r, "yard")}) == 8, what="8 distinct events")
    ids = [e["event_id"] for e in events(recorder, "yard")]
    repeated = {i for i in ids if ids.count(i) > 1}
    assert repeated <= {f"verdict:w-{i}" for i in range(5)}  # at most the first group (5 verdicts per tick)


def test_refused_credentials_are_said_clearly_and_the_right_ones_publish(tmp_path: Path) -> None:
    server = PasswordMosquitto(tmp_path / "broker", "hsi", "s3cret")
    server.start()
    try:
        db = tmp_path / "hsi.duckdb"
        save_verdict(db, "x-0", "yard", 90, now())
        wrong = publisher(server.port, username="hsi", password="wrong")
        report = publish_pending(database(db), wrong, None)
        assert report.error and "refused" in report.error and "MQTT_USERNAME and MQTT_PASSWORD" in report.error
        assert "wrong" not in report.error
        anonymous = publish_pending(database(db), publisher(server.port), None)
        assert anonymous.error and "refused" in anonymous.error
        right = publish_pending(database(db), publisher(server.port, username="hsi", password="s3cret"), None)
        assert right.error is None and right.units == 1
    finally:
        server.stop()


def test_a_broker_that_never_answers_is_a_skip_within_the_timeout(tmp_path: Path) -> None:
    import socket
    import time

    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "x-0", "yard", 90, now())
    with socket.socket() as silent:  # accepts TCP connections (backlog), never sends a CONNACK
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mqtt = publisher(silent.getsockname()[1], connect_timeout_seconds=2)
        started = time.monotonic()
        report = publish_pending(database(db), mqtt, None)
        took = time.monotonic() - started
    assert report.error and "did not answer within 2 s" in report.error
    assert took < 20
    closed = publisher(free_port(), connect_timeout_seconds=2)
    assert "the connection failed: refused" in (publish_pending(database(db), closed, None).error or "")


def test_a_camera_removed_from_the_configuration_loses_its_entities(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "y-0", "yard", 20, now())
    save_verdict(db, "d-0", "door", 20, now())
    publish_pending(database(db), publisher(broker.port), ["yard", "door"])
    assert any("/hsi_door/" in topic for topic in retained(broker, "homeassistant/#"))
    report = publish_pending(database(db), publisher(broker.port), ["yard"])
    assert report.removed == ["door"]
    left = retained(broker, "#")
    assert not [t for t in left if "door" in t], left
    assert "homeassistant/sensor/hsi_yard/risk_level/config" in left
    empties = [m.topic for m in recorder.messages if "hsi_door" in m.topic and m.payload == b""]
    assert len(empties) == 6  # an empty config: Home Assistant removes the entity (4 entities, 2 buttons)


def test_untrusted_camera_names_and_an_oversized_summary_never_break_a_tick(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    db = tmp_path / "hsi.duckdb"
    odd = "Front Door/#1 é+☃"  # a topic separator, wildcards, non-ASCII (DuckDB stores UTF-8 only)
    save_verdict(db, "o-0", odd, 95, now(), summary="intruder " * 2000)
    tick(db, broker.port)
    slug = camera_key(odd).slug
    assert "/" not in slug and "#" not in slug and "+" not in slug
    recorder.wait(lambda r: len(r.on(f"hsi/{slug}/state")) == 1, what="the odd camera's state")
    state = recorder.on(f"hsi/{slug}/state")[0].json()
    assert len(state["summary"]) == HA_STATE_MAX_CHARS and state["summary"].endswith("…")
    assert state["camera"] == "Front Door/#1 é+☃"
    config = json.loads(retained(broker, "homeassistant/#")[f"homeassistant/sensor/hsi_{slug}/risk_level/config"])
    assert config["device"]["name"] == "hsi Front Door/#1 é+☃"


def test_the_sensor_skips_when_off_and_never_raises(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "x-0", "yard", 90, now())
    off = publisher(free_port(), enabled=False)
    assert tick(db, 0, mqtt=off) == "MQTT_PUBLISH is off"
    down = publisher(free_port(), connect_timeout_seconds=1)
    assert "the connection failed" in tick(db, 0, mqtt=down)
    bad_prefix = publisher(free_port(), topic_prefix="hsi/#")
    assert "MQTT_TOPIC_PREFIX" in tick(db, 0, mqtt=bad_prefix)


def test_availability_is_online_while_ticks_come_and_offline_once_they_stop(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    """The last will with a delay (resources/mqtt.py): between ticks the entities stay available; when the ticks stop
    (here after a 5 s delay; 120 s in production) the broker publishes `offline`, retained."""
    import time

    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "x-0", "yard", 20, now())
    mqtt = publisher(broker.port, will_delay_seconds=5)
    for _ in range(4):  # ticks about 1 s apart, well within the delay
        publish_pending(database(db), mqtt, None)
        time.sleep(1)
    assert [m.payload for m in recorder.on("hsi/availability")] == [b"online"] * 4
    recorder.wait(lambda r: r.on("hsi/availability")[-1].payload == b"offline", timeout=30, what="the will")
    assert retained(broker, "hsi/availability") == {"hsi/availability": b"offline"}
    publish_pending(database(db), mqtt, None)
    assert retained(broker, "hsi/availability") == {"hsi/availability": b"online"}


def test_evidence_alerts_are_events_and_floor_reasons_are_the_states_reasons(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    from hsi_dagster.core.verdict.evidence_alerts import EvidenceAlert
    from hsi_dagster.storage.evidence_alerts import claim_evidence_alert

    db = tmp_path / "hsi.duckdb"
    moment = now() - timedelta(minutes=2)
    alert = EvidenceAlert("gate:t1:1", "gate", "t1", "d1", 70, "high", ("weapon: knife (label)",), moment)
    save_verdict(db, "g-0", "gate", 75, moment + timedelta(seconds=30))
    with connect(db) as conn:
        assert claim_evidence_alert(conn, alert, moment + timedelta(seconds=1))
        conn.execute(
            "UPDATE risk_assessments SET floor_score = 75, floor_reasons = ? WHERE batch_id = 'g-0'",
            [json.dumps(["night presence at the gate (zone, ts)"])],
        )
    tick(db, broker.port)
    recorder.wait(lambda r: len(events(r, "gate")) == 2, what="the evidence event and the verdict event")
    first, second = events(recorder, "gate")
    assert (first["kind"], first["event_id"], first["reasons"]) == (
        "evidence",
        "evidence:gate:t1:1",
        ["weapon: knife (label)"],
    )
    assert (second["kind"], second["floor_score"]) == ("verdict", 75)
    state = json.loads(retained(broker, "hsi/gate/state")["hsi/gate/state"])
    assert state["reasons"] == ["night presence at the gate (zone, ts)"]
    tick(db, broker.port)
    assert len(events(recorder, "gate")) == 2  # each once


def test_entities_start_from_each_cameras_last_verdict_without_an_event_for_it(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    """Publishing turned on: verdicts older than the first tick's hour are not events, but each camera's newest
    one is its first state, so the entities show something at once."""
    db = tmp_path / "hsi.duckdb"
    hours_ago = now() - timedelta(hours=3)
    save_verdict(db, "old-1", "yard", 90, hours_ago)
    save_verdict(db, "old-2", "yard", 30, hours_ago + timedelta(minutes=5))
    save_verdict(db, "old-3", "door", 70, hours_ago)
    report = publish_pending(database(db), publisher(broker.port), None)
    assert report.states == 2 and report.events == 0
    states = retained(broker, "hsi/+/state")
    assert json.loads(states["hsi/yard/state"])["batch_id"] == "old-2"
    assert json.loads(states["hsi/door/state"])["threat"] == "ON"
    assert recorder.on("/event") == []
    assert publish_pending(database(db), publisher(broker.port), None).units == 0  # once


def test_the_sensor_runs_by_default_only_with_mqtt_publish_and_the_password_stays_an_env_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hsi_dagster.definitions import build_resources
    from hsi_dagster.sensors.verdict_publisher import _publish_default_status

    monkeypatch.setenv("HSI_ENV_FILE", "/dev/null")
    assert _publish_default_status() == dg.DefaultSensorStatus.STOPPED
    monkeypatch.setenv("MQTT_PUBLISH", "true")
    assert _publish_default_status() == dg.DefaultSensorStatus.RUNNING
    settings = load_settings(env_file="/dev/null", MQTT_PASSWORD="s3cret", MQTT_USERNAME="hsi")
    mqtt = build_resources(settings)["mqtt"]
    assert isinstance(mqtt, MqttPublisherResource) and mqtt.enabled
    assert "s3cret" not in repr(mqtt.password) and "MQTT_PASSWORD" in repr(mqtt.password)


def test_a_floor_only_verdict_is_published_with_the_floors_reasons_as_its_summary(
    tmp_path: Path, broker: Mosquitto, recorder: Recorder
) -> None:
    """No usable model reply, the evidence floor decided (status floor_only, core/verdict/final.py): still a verdict."""
    db = tmp_path / "hsi.duckdb"
    save_verdict(
        db,
        "f-0",
        "gate",
        85,
        now(),
        summary="",
        status="floor_only",
        floor_score=85,
        floor_reasons=json.dumps(["weapon: knife (label)"]),
    )
    tick(db, broker.port)
    recorder.wait(lambda r: len(events(r, "gate")) == 1, what="the floor-only event")
    event = events(recorder, "gate")[0]
    assert (event["level"], event["summary"], event["reasons"]) == (
        "critical",
        "weapon: knife (label)",
        ["weapon: knife (label)"],
    )
