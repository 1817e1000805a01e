"""The alert before the LLM, on a real Dagster instance, a real DuckDB file and a real local webhook receiver.

Through inbox_sensor's tick: a knife beside a stranger posts one evidence-only alert at once (no window closed, no
LLM); the same detections seen again post nothing; a claim whose tick died before its post is posted once by the
next tick; old detections (a replay) never alert; a file landing while the tick alerts is loaded by that tick.
Through evidence_watch_sensor (sensors/evidence_watch.py): a file that lands while no inbox tick runs is loaded and
alerts within its own tick; while an inbox tick runs, that tick alone loads (the file once, one alert); a slow
webhook never holds the loader lock; what it cannot load is left to inbox_sensor; without an inbox it alerts on
detections written by other paths."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.core.verdict.evidence_alerts import EVIDENCE_ONLY, EvidenceAlert
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.sensors import evidence_watch_sensor, inbox_sensor
from hsi_dagster.sensors.inbox import INBOX_LOADER_LOCK
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


# ------------------------------------------------------------------ evidence_watch_sensor and the hold
HOLD = "4.5"  # SENSOR_HOLD_SECONDS for the ticks that hold on (the most the setting allows)
DEADLINE_S = 60.0  # generous: a loaded 2-core machine


class Tick(threading.Thread):
    """One sensor tick evaluated in its own thread, as the daemon's thread pool does."""

    def __init__(self, sensor: dg.SensorDefinition, instance: dg.DagsterInstance, res: dict) -> None:
        super().__init__(daemon=True)
        self.sensor, self.instance, self.res = sensor, instance, res
        self.result: dg.SensorExecutionData | None = None
        self.error: BaseException | None = None
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            self.result = sensor_tick(self.sensor, self.instance, self.res, None)
        except BaseException as exc:  # noqa: BLE001 - re-raised by outcome() in the test's thread
            self.error = exc
        self.ended_at = time.time()

    def outcome(self) -> dg.SensorExecutionData:
        self.join(DEADLINE_S)
        assert not self.is_alive(), f"{self.sensor.name}'s tick did not end"
        if self.error:
            raise self.error
        assert self.result is not None
        return self.result


def setup(tmp_path: Path, webhook: Webhook, **settings: str) -> tuple[Path, str, dict]:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "hsi.duckdb")
    return inbox, db, resources(db, alert_webhook_url=webhook.url, HSI_INBOX_DIR=str(inbox), **settings)


def drop(inbox: Path, name: str, text: str) -> None:
    """As a writer does: a `.`-prefixed file renamed when complete."""
    (inbox / f".{name}").write_text(text)
    os.rename(inbox / f".{name}", inbox / name)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def loaded(db: str) -> tuple[int, int]:
    """(detections, ingested_files rows)."""
    with HsiDuckDBResource(database=db).get_connection(read_only=True) as conn:
        detections = conn.execute("SELECT count(*) FROM detections").fetchone()
        files = conn.execute("SELECT count(*) FROM ingested_files").fetchone()
    assert detections is not None and files is not None
    return detections[0], files[0]


def loaded_by(result: dg.SensorExecutionData) -> list[str]:
    return [event.description or "" for event in result.asset_events]


def test_a_file_landing_while_no_inbox_tick_runs_alerts_within_evidence_watchs_tick(instance, tmp_path, webhook):
    inbox, db, res = setup(tmp_path, webhook, SENSOR_HOLD_SECONDS=HOLD)
    watching = Tick(evidence_watch_sensor, instance, res)
    watching.start()
    time.sleep(2.0)  # the tick's first pass has found an empty inbox; it holds on (4.5 s)
    drop(inbox, "knife.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=2)))
    dropped_at = time.time()
    wait_until(lambda: webhook.posts, "no evidence-only alert")
    result = watching.outcome()
    [post] = webhook.posts
    assert post["json"]["kind"] == EVIDENCE_ONLY and post["json"]["track_id"] == "t1"
    assert loaded_by(result) == ["1 inbox files loaded by evidence_watch_sensor"]
    assert result.run_requests == []  # windows stay inbox_sensor's
    assert watching.ended_at > dropped_at  # loaded and alerted by the tick that was holding on
    assert not (inbox / "knife.jsonl").exists()  # retired to the archive, as inbox_sensor does
    # the next inbox tick finds nothing left to load and nothing to post again
    after = sensor_tick(inbox_sensor, instance, res, None)
    assert after.asset_events == [] and len(webhook.posts) == 1 and len(stored(db)) == 1
    assert loaded(db) == (5, 1)


def test_while_an_inbox_tick_runs_it_alone_loads_and_alerts(instance, tmp_path, webhook):
    inbox, db, res = setup(tmp_path, webhook, SENSOR_HOLD_SECONDS=HOLD)
    inboxing = Tick(inbox_sensor, instance, res)
    inboxing.start()
    wait_until(INBOX_LOADER_LOCK.locked, "inbox_sensor's tick never took the loader lock")
    watching = Tick(evidence_watch_sensor, instance, res)
    watching.start()
    drop(inbox, "knife.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=2)))
    by_inbox, by_watch = inboxing.outcome(), watching.outcome()
    assert loaded_by(by_inbox) == ["1 inbox files loaded by inbox_sensor"]
    assert loaded_by(by_watch) == []
    assert [p["json"]["kind"] for p in webhook.posts] == [EVIDENCE_ONLY] and len(stored(db)) == 1
    assert loaded(db) == (5, 1)


def test_a_file_landing_while_the_inbox_tick_alerts_is_loaded_by_that_tick(instance, tmp_path, webhook):
    """The tick looks at what changed since its listing, not since it went back to waiting: a file that lands while
    it posts an alert (or plans) is not left for the end of the hold."""
    inbox, db, res = setup(tmp_path, webhook, SENSOR_HOLD_SECONDS=HOLD)
    # seen 10 s ago: the window's next change (its close) is half a minute away, nothing else wakes the tick
    drop(inbox, "knife.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=10)))
    webhook.mode = "hang"
    inboxing = Tick(inbox_sensor, instance, res)
    inboxing.start()
    wait_until(lambda: webhook.posts, "no evidence-only alert")  # the tick is posting, after its listing
    drop(inbox, "later.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=9), prefix="later"))
    webhook.release.set()
    [event] = inboxing.outcome().asset_events
    assert event.description == "2 inbox files loaded by inbox_sensor"
    assert loaded(db) == (10, 2) and len(stored(db)) == 1  # the same track: still the one alert


def test_a_slow_webhook_never_holds_the_loader_lock(instance, tmp_path, webhook):
    inbox, db, res = setup(tmp_path, webhook)
    drop(inbox, "knife.jsonl", knife_at_the_door(datetime.now(UTC) - timedelta(seconds=2)))
    webhook.mode = "hang"  # the post waits for the receiver (until the resource's 5 s timeout)
    watching = Tick(evidence_watch_sensor, instance, res)
    watching.start()
    wait_until(lambda: webhook.posts, "no evidence-only alert")
    assert watching.is_alive()  # still posting
    assert INBOX_LOADER_LOCK.acquire(timeout=1.0), "an inbox tick would wait for the webhook"
    INBOX_LOADER_LOCK.release()
    webhook.release.set()
    watching.outcome()
    assert [r["alert_key"] for r in stored(db)] == [webhook.posts[0]["json"]["alert_id"].removeprefix("evidence:")]


def test_a_file_it_cannot_load_is_left_to_inbox_sensor(instance, tmp_path, webhook):
    inbox, db, res = setup(tmp_path, webhook)
    whole = gzip.compress(knife_at_the_door(datetime.now(UTC) - timedelta(hours=1)).encode())
    (inbox / "broken.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # cut short: reading it fails
    first = sensor_tick(evidence_watch_sensor, instance, res, None)
    assert first.asset_events == [] and (inbox / "broken.jsonl.gz").exists()
    again = sensor_tick(evidence_watch_sensor, instance, res, first.cursor)
    assert again.asset_events == [] and again.cursor == first.cursor  # not retried until it changes
    reported = sensor_tick(inbox_sensor, instance, res, None)
    [event] = reported.asset_events
    assert "broken.jsonl.gz" in str(event.metadata["failed"].value)


def test_without_an_inbox_it_alerts_on_detections_from_other_paths(instance, tmp_path, webhook):
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, knife_at_the_door(datetime.now(UTC) - timedelta(seconds=2)).splitlines())  # as `hsi ingest`
    res = resources(db, alert_webhook_url=webhook.url)  # HSI_INBOX_DIR: a folder that does not exist
    sensor_tick(evidence_watch_sensor, instance, res, None)
    sensor_tick(evidence_watch_sensor, instance, res, None)
    assert [p["json"]["kind"] for p in webhook.posts] == [EVIDENCE_ONLY] and len(stored(db)) == 1


def test_a_household_exception_stops_its_presence_alert_never_a_forcing_one(tmp_path) -> None:
    """claim_evidence_alerts on a real DuckDB file: a stranger on the lawn at night the household marked harmless
    three nights running (stored contexts, verdicts and corrections) no longer alerts before the LLM; someone prying
    on the same lawn at the same hour still does, and without the corrections the lawn alerts."""
    from hsi_dagster.core.context.camera_profiles import CameraProfile
    from hsi_dagster.core.context.enrichment import build_context
    from hsi_dagster.core.outbound.corrections import check_request
    from hsi_dagster.sensors.alerts import claim_evidence_alerts
    from hsi_dagster.settings import load_settings
    from hsi_dagster.storage.corrections import correct
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.pipeline_tables import save_context
    from tests.support.verdicts import save_verdict

    now = datetime.now(UTC)
    offset = (2 - now.hour) % 24  # a fixed-offset zone where it is 02:xx now: night whenever the test runs
    offset = offset - 24 if offset > 14 else offset
    zone = f"Etc/GMT{-offset:+d}" if offset else "UTC"  # Etc/GMT-3 is UTC+3
    profile = CameraProfile(
        camera_id="yard", timezone=zone, zones=["lawn", "patio"], entry_zones=["patio"], private_zones=["lawn"]
    )

    def lawn(prefix: str, start: datetime, **enrichment) -> list[str]:
        return [
            detection(
                f"{prefix}{n}",
                "yard",
                start + timedelta(seconds=2 * n),
                "person",
                0.88,
                track_id=f"{prefix}t",
                zone="lawn",
                enrichment={**STRANGER, **enrichment},
            )
            for n in range(3)
        ]

    def claimed(db: Path) -> list[EvidenceAlert]:
        settings = load_settings(os.devnull, HSI_DUCKDB_PATH=str(db))
        return claim_evidence_alerts(HsiDuckDBResource(database=str(db)), settings, {"yard": profile}, now)

    corrected, control = tmp_path / "corrected.duckdb", tmp_path / "control.duckdb"
    for night in (3, 2, 1):  # the same lawn, the same hour, corrected to low the morning after
        start = now - timedelta(days=night)
        batch = {"batch_id": f"lawn-{night}", "camera_id": "yard", "started_at": start, "last_ts": start}
        rows = [{**json.loads(line), "ts": start} for line in lawn(f"old{night}-", start)]
        for row in rows:
            row["enrichment"] = STRANGER
        context = build_context(batch, rows, quality_level="full", clip_noise_threshold=0.2, camera_profile=profile)
        with connect(corrected) as conn:
            save_context(conn, batch["batch_id"], context.to_json(), "full", [])
        save_verdict(corrected, batch["batch_id"], "yard", 70, start + timedelta(minutes=1), floor_score=70)
        with connect(corrected) as conn:
            correct(conn, check_request(batch["batch_id"], "low", source="cli"), start + timedelta(hours=8))

    for db in (corrected, control):
        ingest_lines(str(db), lawn("now-", now - timedelta(seconds=20)))
    (alert,) = claimed(control)
    assert alert.risk_level == "high" and alert.reasons[0].startswith("person at night")
    assert claimed(corrected) == []  # the exception in force lifts the presence rule

    for db in (corrected, control):
        ingest_lines(str(db), lawn("pry-", now - timedelta(seconds=10), action={"label": "prying", "score": 0.9}))
    (forcing,) = claimed(corrected)
    assert forcing.track_id == "pry-t" and forcing.risk_score == 75 and forcing.reasons[0].startswith("forcing")
