"""The alert before the LLM, through inbox_sensor's tick on a real DuckDB file and a real local webhook receiver:
a knife beside a stranger posts one evidence-only alert at once (no window closed, no LLM); the same detections seen
again post nothing; a claim whose tick died before its post is posted once by the next tick; old detections (a
replay) never alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from hsi_dagster.core.evidence_alerts import EVIDENCE_ONLY, EvidenceAlert
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.sensors import high_risk_alert_sensor, inbox_sensor
from hsi_dagster.storage.evidence_alerts import claim_evidence_alert, evidence_alerts_after
from hsi_dagster.storage.ingest import ingest_lines
from tests.dagster.test_alert_webhook import Webhook
from tests.support.pipeline_helpers import detection, resources, sensor_tick

STRANGER = {"reid": {"identity": "unknown", "known": False, "score": 0.2}}


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def webhook():
    with Webhook() as server:
        yield server


def knife_at_the_door(start: datetime, prefix: str = "") -> str:
    lines = [
        detection(
            f"{prefix}p{n}",
            "garage",
            start + timedelta(seconds=n),
            "person",
            0.85,
            track_id="t1",
            zone="garage_door",
            enrichment=STRANGER,
        )
        for n in range(3)
    ]
    lines += [
        detection(
            f"{prefix}k{n}",
            "garage",
            start + timedelta(seconds=n, milliseconds=500),
            "knife",
            0.81,
            track_id="k1",
            zone="garage_door",
        )
        for n in range(2)
    ]
    return "\n".join(lines) + "\n"


def dropped(tmp_path, webhook, name: str, text: str) -> tuple[str, dict]:
    """An inbox holding one file; the database path and the resources (webhook on)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir(exist_ok=True)
    (inbox / name).write_text(text)
    db = str(tmp_path / "hsi.duckdb")
    return db, resources(db, alert_webhook_url=webhook.url, HSI_INBOX_DIR=str(inbox))


def stored(db: str) -> list[dict]:
    with HsiDuckDBResource(database=db).get_connection(read_only=True) as conn:
        return evidence_alerts_after(conn, datetime(2000, 1, 1, tzinfo=UTC), 100)


def test_a_knife_beside_a_stranger_posts_one_evidence_only_alert_in_the_tick(instance, tmp_path, webhook):
    db, res = dropped(tmp_path, webhook, "a.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=3)))
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert first.run_requests == []  # the window is still open (no fast-path person): no LLM yet, the alert is out
    [post] = webhook.posts
    body = post["json"]
    assert body["kind"] == EVIDENCE_ONLY and body["risk_level"] == "critical" and body["camera_id"] == "garage"
    assert body["track_id"] == "t1" and body["batch_id"] is None and "weapon" in body["reasons"][0]
    [row] = stored(db)
    assert row["webhook_status"] == "sent" and row["alert_key"] == body["alert_id"].removeprefix("evidence:")
    # the next tick, and one that lost its cursor, see the same detections: nothing is sent twice
    sensor_tick(inbox_sensor, instance, res, first.cursor)
    sensor_tick(inbox_sensor, instance, res, None)
    assert len(webhook.posts) == 1 and len(stored(db)) == 1
    # more of the same track: still the one alert (one per track and cooldown)
    (tmp_path / "inbox" / "b.jsonl").write_text(knife_at_the_door(datetime.now(UTC) - timedelta(seconds=1), prefix="b"))
    sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert len(webhook.posts) == 1


def test_a_claim_whose_tick_died_before_posting_is_posted_once_by_the_next_tick(instance, tmp_path, webhook):
    car = detection("c1", "porch", datetime.now(UTC) - timedelta(seconds=2)) + "\n"
    db, res = dropped(tmp_path, webhook, "calm.jsonl", car)
    sensor_tick(inbox_sensor, instance, res, None)
    assert webhook.posts == []  # a car: nothing to say
    died = EvidenceAlert("porch:t9:1", "porch", "t9", "c1", 90, "critical", ("weapon: knife",), datetime.now(UTC))
    with HsiDuckDBResource(database=db).get_connection() as conn:  # claimed a minute ago, never posted
        assert claim_evidence_alert(conn, died, datetime.now(UTC) - timedelta(seconds=60))
    sensor_tick(inbox_sensor, instance, res, None)
    sensor_tick(inbox_sensor, instance, res, None)
    assert [p["json"]["alert_id"] for p in webhook.posts] == ["evidence:porch:t9:1"]
    assert [r["webhook_status"] for r in stored(db)] == ["sent"]


def test_replayed_old_detections_never_alert(instance, tmp_path, webhook):
    db, res = dropped(tmp_path, webhook, "old.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(hours=3)))
    sensor_tick(inbox_sensor, instance, res, None)
    assert webhook.posts == [] and stored(db) == []


def test_without_an_inbox_the_alert_sensor_alerts_on_detections_from_other_paths(instance, tmp_path, webhook):
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, knife_at_the_door(datetime.now(UTC) - timedelta(seconds=2)).splitlines())  # as `hsi ingest`
    res = resources(db, alert_webhook_url=webhook.url)  # HSI_INBOX_DIR: a folder that does not exist
    sensor_tick(high_risk_alert_sensor, instance, res, None)
    sensor_tick(high_risk_alert_sensor, instance, res, None)
    assert [p["json"]["kind"] for p in webhook.posts] == [EVIDENCE_ONLY]
