"""`hsi mqtt status` against a real mosquitto, a broker refusing the credentials, and one that never answers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.sensors.verdict_publisher import publish_pending
from tests.support.mosquitto import Mosquitto, running_broker
from tests.support.verdicts import PasswordMosquitto, database, publisher, save_verdict


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_ENV_FILE", "/dev/null")
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    monkeypatch.setenv("MQTT_PUBLISH", "true")
    return db


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running_broker(tmp_path / "broker") as server:
        yield server


def status(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["mqtt", "status", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_status_shows_the_connection_last_publish_per_camera_and_the_backlog(
    env: Path, broker: Mosquitto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MQTT_PORT", str(broker.port))
    now = datetime.now(UTC)
    save_verdict(env, "y-1", "yard", 80, now)
    unmeasured = "no measured trust for qwen|1|plain|full: stated default trust 2"
    save_verdict(
        env, "d-1", "door", 20, now, model="qwen", model_level="critical", model_trust=2, trust_source="default",
        trust_reason=unmeasured,
    )  # fmt: skip
    assert publish_pending(database(env), publisher(broker.port), None).units == 2
    save_verdict(env, "y-2", "yard", 90, now)  # stored after the tick: waiting

    code, report = status(capsys)
    assert code == 0
    assert report["broker"]["connected"] and report["broker"]["availability"] == "online"
    cameras = {row["camera_id"]: row for row in report["cameras"]}
    assert (cameras["yard"]["last_batch_id"], cameras["yard"]["last_sent"]) == ("y-1", "event+state")
    assert cameras["door"]["entities"] is True and cameras["door"]["last_published_at"]
    assert report["backlog"] == {"yard": 1}
    assert report["publisher"]["last_error"] is None
    (trust,) = report["trust"]  # the rows the pipeline stored with a trust (the others predate it)
    assert (trust["model"], trust["model_trust"], trust["trust_source"], trust["verdicts"]) == ("qwen", 2, "default", 1)

    assert main(["mqtt", "status"]) == 0  # the text form
    text = capsys.readouterr().out
    assert "connected in" in text and "yard: last publish" in text and "backlog: 1 verdicts/alerts waiting" in text
    assert f"WARNING unmeasured model trust 2 for qwen ({unmeasured}): 1 of the latest verdicts" in text


def test_a_broker_that_never_answers_is_reported_within_the_timeout(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as silent:  # accepts TCP (listen backlog) and never sends a CONNACK
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setenv("MQTT_PORT", str(silent.getsockname()[1]))
        started = time.monotonic()
        code = main(["mqtt", "status", "--timeout", "2"])
        took = time.monotonic() - started
    out = capsys.readouterr().out
    assert code == 1
    assert "NOT CONNECTED" in out and "did not answer within 2 s" in out and "no CONNACK" in out
    assert took < 15  # 2 s and the shutdown; generous for a loaded machine


def test_refused_credentials_are_named(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = PasswordMosquitto(tmp_path / "auth", "hsi", "right")
    server.start()
    try:
        monkeypatch.setenv("MQTT_PORT", str(server.port))
        monkeypatch.setenv("MQTT_USERNAME", "hsi")
        monkeypatch.setenv("MQTT_PASSWORD", "wrong-password")
        code, report = status(capsys)
        assert code == 1
        assert "refused" in report["broker"]["error"] and "MQTT_USERNAME and MQTT_PASSWORD" in report["broker"]["error"]
        assert "wrong-password" not in json.dumps(report)
        monkeypatch.setenv("MQTT_PASSWORD", "right")
        assert status(capsys)[0] == 0
    finally:
        server.stop()


def test_a_wildcard_topic_prefix_is_rejected_at_start_naming_the_variable(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MQTT_TOPIC_PREFIX", "home/+/hsi")
    assert main(["mqtt", "status"]) == 2
    assert "MQTT_TOPIC_PREFIX='home/+/hsi' is invalid: contains a wildcard" in capsys.readouterr().err
