"""Evidence-only alerts linked into visits, on a real Dagster instance, real DuckDB files and a real local webhook
receiver: the alert is sent by inbox_sensor's tick (sensors/alerts.py), the batches by the batch window sensor and
`detection_batches` + `enriched_contexts` materialized, the batch's alert decided by `risk_alert_for` as
high_risk_alert_sensor decides it.

- An evidence alert and the later batch of the same detections are one visit (the batch takes the alert's sighting)
  and one alert: the batch's critical verdict sends nothing new (no webhook post, no second MQTT event).
- A visit that reached high through earlier batches makes the evidence alert name it; a second evidence alert of the
  same visit at the same level is stored, not posted (one alert per visit and level).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.assessments import batch_floor
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.core.outbound.mqtt_messages import Topics, plan_camera
from hsi_dagster.core.verdict.final import final_verdict
from hsi_dagster.sensors import batch_window_sensor, inbox_sensor
from hsi_dagster.storage.alerts import risk_alert_for
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.mqtt_outbox import unpublished_evidence_alerts, unpublished_verdicts
from hsi_dagster.storage.pipeline_tables import save_assessment
from tests.dagster.test_alert_webhook import Webhook
from tests.dagster.test_evidence_alerts import knife_at_the_door
from tests.dagster.test_visits_pipeline import PROFILES, look
from tests.support.pipeline_helpers import resources, sensor_tick


@pytest.fixture
def webhook():
    with Webhook() as server:
        yield server


def night_now() -> dict[str, str]:
    """EVIDENCE_NIGHT_* hours around the current UTC hour: the test's live detections are at night."""
    hour = datetime.now(UTC).hour
    return {"EVIDENCE_NIGHT_START_HOUR": str((hour - 2) % 24), "EVIDENCE_NIGHT_END_HOUR": str((hour + 2) % 24)}


def setup(tmp_path, webhook) -> tuple[str, dict]:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text(PROFILES + "  garage: {timezone: UTC, zones: [garage_door], entry_zones: [garage_door]}\n")
    db = str(tmp_path / "hsi.duckdb")
    res = resources(
        db, alert_webhook_url=webhook.url, HSI_INBOX_DIR=str(inbox), CAMERA_CONTEXT_PATH=str(profiles), **night_now()
    )
    return db, res


def judge_batches(db: str, res: dict, instance: dg.DagsterInstance, requested: tuple[str, ...] = ()) -> list[str]:
    """Every closed window (the batch window sensor's, and those an inbox tick already `requested`) through
    detection_batches + enriched_contexts in time order, its verdict stored as risk_assessments stores it (a model
    that said 10, trust 0: the floor decides); the batch ids."""
    settings = res["pipeline_settings"].get()
    profiles = res["pipeline_settings"].camera_profiles()
    tick = sensor_tick(batch_window_sensor, instance, res, None)
    found = {r.partition_key for r in tick.run_requests if r.partition_key} | set(requested)
    keys = sorted(found, key=lambda key: key.split("__")[1])
    for key in keys:
        result = dg.materialize(
            [detection_batches, enriched_contexts], partition_key=key, instance=instance, resources=res
        )
        assert result.success
        with connect(db) as conn:
            camera = conn.execute("SELECT camera_id FROM detection_batches WHERE batch_id = ?", [key]).fetchone()[0]
            floor, _ = batch_floor(conn, key, camera, settings, profiles)
            verdict = final_verdict(10, floor, 0)
            save_assessment(conn, {"batch_id": key, "camera_id": camera, "status": "ok", **verdict.columns()})
    return keys


def visit_rows(db: str) -> tuple[list, list]:
    with duckdb.connect(db, read_only=True) as conn:
        visits = conn.execute("SELECT visit_id, cameras, batch_count, sightings FROM visits").fetchall()
        links = conn.execute("SELECT batch_id, visit_id, link FROM visit_batches ORDER BY linked_at").fetchall()
    return visits, links


def test_an_evidence_alert_and_the_later_batch_of_its_detections_are_one_visit_and_one_alert(tmp_path, webhook):
    db, res = setup(tmp_path, webhook)
    (tmp_path / "inbox" / "knife.jsonl").write_text(knife_at_the_door(datetime.now(UTC) - timedelta(seconds=80)))
    with dg.instance_for_test() as instance:
        first = sensor_tick(inbox_sensor, instance, res, None)
        [post] = webhook.posts
        alert_key = post["json"]["alert_id"].removeprefix("evidence:")
        visit_id = f"visit:evidence:{alert_key}"
        assert post["json"]["risk_level"] == "critical" and post["json"]["visit"]["visit_id"] == visit_id
        assert post["json"]["visit"]["cameras"] == ["garage"]
        sensor_tick(inbox_sensor, instance, res, None)  # the same detections again: linked nothing twice
        visits, links = visit_rows(db)
        assert [(v[0], v[2]) for v in visits] == [(visit_id, 1)] and len(links) == 1
        requested = tuple(r.partition_key for r in first.run_requests if r.partition_key)
        [batch_id] = judge_batches(db, res, instance, requested)
    visits, links = visit_rows(db)
    [(stored_id, cameras, batch_count, sightings)] = visits
    assert (stored_id, cameras, batch_count) == (visit_id, ["garage"], 1)
    assert [s["batch_id"] for s in json.loads(sightings)] == [batch_id]  # the batch took the alert's place
    assert links == [(f"evidence:{alert_key}", visit_id, "first"), (batch_id, visit_id, f"evidence alert {alert_key}")]
    with connect(db) as conn:
        assert conn.execute("SELECT risk_level FROM risk_assessments").fetchone() == ("critical",)
        assert risk_alert_for(conn, batch_id) is None  # the evidence alert said critical already
        [verdict] = unpublished_verdicts(conn, datetime.now(UTC) - timedelta(hours=1), 10)
    assert len(webhook.posts) == 1
    # MQTT: the verdict updates the retained state, and is no second event (the evidence event was the one)
    assert verdict.evidence_level == "critical" and verdict.said_by_evidence
    [unit] = plan_camera("garage", [verdict], [], None, Topics("hsi", "homeassistant"))
    assert unit.sent == "state" and [m.topic for m in unit.messages] == ["hsi/garage/state"]


def test_a_visit_already_high_is_named_by_the_evidence_alert_and_alerts_once_per_level(tmp_path, webhook):
    db, res = setup(tmp_path, webhook)
    now = datetime.now(UTC)
    looks = [
        *look("a", "front_door", now - timedelta(minutes=9)),
        *look("b", "driveway", now - timedelta(minutes=7)),
        *look("c", "side_gate", now - timedelta(minutes=5), zone="alley"),
    ]
    (tmp_path / "inbox" / "looks.jsonl").write_text("\n".join(looks) + "\n")
    with dg.instance_for_test() as instance:
        loaded = sensor_tick(inbox_sensor, instance, res, None)
        assert webhook.posts == []  # a stranger looking: no evidence-only alert
        keys = judge_batches(db, res, instance, tuple(r.partition_key for r in loaded.run_requests if r.partition_key))
        assert len(keys) == 3
        with connect(db) as conn:
            visit_id, level = conn.execute("SELECT visit_id, risk_level FROM visits").fetchone()
        assert level == "high"
        (tmp_path / "inbox" / "knife.jsonl").write_text(knife_at_the_door(now - timedelta(seconds=3)))
        sensor_tick(inbox_sensor, instance, res, None)
        [post] = webhook.posts
        body = post["json"]
        assert body["risk_level"] == "critical" and body["visit"]["visit_id"] == visit_id
        assert body["visit"]["cameras"] == ["front_door", "driveway", "side_gate", "garage"]
        assert body["visit"]["level"] == "high"
        assert body["reasons"][0].startswith("weapon")  # the alert's own reason first, then the visit's
        assert any(r.startswith(f"visit {visit_id}: third camera in") for r in body["reasons"][1:])
        # a second knife on another camera of the same visit: critical again, stored, not posted
        (tmp_path / "inbox" / "knife2.jsonl").write_text(
            knife_at_the_door(datetime.now(UTC) - timedelta(seconds=1), prefix="x").replace('"garage"', '"driveway"')
        )
        sensor_tick(inbox_sensor, instance, res, None)
    assert len(webhook.posts) == 1
    with duckdb.connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT camera_id, webhook_status FROM evidence_alerts ORDER BY created_at").fetchall()
        linked = conn.execute("SELECT count(DISTINCT visit_id) FROM visit_batches").fetchone()
    assert rows[0] == ("garage", "sent")
    assert rows[1][0] == "driveway" and rows[1][1] == f"visit already alerted: {body['alert_id']}"
    assert linked == (1,)
    # nor is it a second Home Assistant event: the MQTT publisher records it and sends nothing
    with duckdb.connect(db, read_only=True) as conn:
        pending = unpublished_evidence_alerts(conn, datetime.now(UTC) - timedelta(hours=1), 10)
    second = next(a for a in pending if a.camera_id == "driveway")
    assert second.visit_alerted == body["alert_id"]
    [unit] = plan_camera("driveway", [], [second], None, Topics("hsi", "homeassistant"))
    assert (unit.sent, unit.messages) == ("visit already alerted", ())


def test_an_evidence_alert_whose_visit_cannot_be_linked_still_goes_out(tmp_path, webhook, caplog):
    """Fault injection on the real database: the visit tables renamed away, the alert is posted without a visit and
    the failure is logged naming the alert."""
    db, res = setup(tmp_path, webhook)
    with connect(db) as conn:
        conn.execute("DROP INDEX visit_batches_visit")
        conn.execute("ALTER TABLE visit_batches RENAME TO visit_batches_gone")
    (tmp_path / "inbox" / "knife.jsonl").write_text(knife_at_the_door(datetime.now(UTC) - timedelta(seconds=3)))
    with dg.instance_for_test() as instance:
        sensor_tick(inbox_sensor, instance, res, None)
    [post] = webhook.posts
    assert post["json"]["risk_level"] == "critical" and "visit" not in post["json"]
    assert any(
        "not linked into a visit" in r.getMessage() and post["json"]["alert_id"][9:] in r.getMessage()
        for r in caplog.records
    )
