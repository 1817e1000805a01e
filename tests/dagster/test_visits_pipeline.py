"""Visits through the real pipeline on real DuckDB files and real Dagster instances: detections ingested, batched by
the batch window sensor, `detection_batches` and `enriched_contexts` materialized batch by batch in time order (the
context links the batch into its visit), then the floor `risk_assessments` computes (`batch_floor`, the same call,
no LLM needed for the floor). The casing visit of issue 44 climbs low -> medium -> high with the visit named; the
harmless visits stay low."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import duckdb

from hsi_dagster.assets.assessments import batch_floor
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.core.outbound.mqtt_messages import state_payload
from hsi_dagster.core.verdict.final import final_verdict
from hsi_dagster.resources.alerts import AlertWebhookResource
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.alerts import risk_alert_for
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.storage.mqtt_outbox import unpublished_verdicts
from hsi_dagster.storage.pipeline_tables import load_assessment, save_assessment
from tests.support.pipeline_helpers import detection, resources, sensor_tick

PROFILES = """cameras:
  front_door: {timezone: UTC, zones: [pavement, porch], entry_zones: [porch]}
  driveway: {timezone: UTC, zones: [pavement, drive], private_zones: [drive]}
  side_gate: {timezone: UTC, zones: [alley, gate], entry_zones: [gate]}
  garden: {timezone: UTC, zones: [lawn], private_zones: [lawn]}
"""
STRANGER = {"reid": {"identity": "unknown", "known": False, "score": 0.2}}


def known(name: str) -> dict[str, Any]:
    return {"reid": {"identity": f"resident:{name}", "known": True, "score": 0.95}}


def night(hour: int, minute: int) -> datetime:
    """Yesterday at hour:minute UTC: in the past whatever the time of the run."""
    day = datetime.now(UTC).date() - timedelta(days=1)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def look(
    prefix: str, camera: str, start: datetime, *, label="person", zone="pavement", enrichment=None, track="t1"
) -> list[str]:
    """A person (or animal) standing 20 s in view: five detections of one track, 5 s apart, one batch."""
    return [
        detection(
            f"{prefix}-{n}",
            camera,
            start + timedelta(seconds=5 * n),
            label,
            0.85,  # under FAST_PATH_CONFIDENCE: one batch per look, not one per detection
            zone=zone,
            track_id=f"{prefix}-{track}",
            enrichment=enrichment if enrichment is not None else dict(STRANGER),
        )
        for n in range(5)
    ]


def run(
    tmp_path, lines: list[str], profiles_yaml: str = PROFILES, **settings_overrides: str
) -> tuple[str, list[tuple[str, Any, dict]], dict]:
    """Each batch through detection_batches + enriched_contexts in time order, then its floor right after (as
    risk_assessments would judge it then) and its verdict stored as risk_assessments stores it, for a model that said
    10 with trust 0: [(batch_id, floor, enriched_contexts metadata)], and the resources."""
    db = str(tmp_path / "hsi.duckdb")
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text(profiles_yaml)
    ingest_lines(db, lines)
    res = resources(db, CAMERA_CONTEXT_PATH=str(profiles), **settings_overrides)
    settings = res["pipeline_settings"].get()
    camera_profiles = res["pipeline_settings"].camera_profiles()
    out = []
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        keys = sorted((r.partition_key for r in tick.run_requests), key=lambda key: key.split("__")[1])
        for key in keys:
            result = dg.materialize(
                [detection_batches, enriched_contexts], partition_key=key, instance=instance, resources=res
            )
            assert result.success
            metadata = {
                e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
                for e in result.get_asset_materialization_events()
            }["enriched_contexts"]
            with connect(db) as conn:
                camera = conn.execute("SELECT camera_id FROM detection_batches WHERE batch_id = ?", [key]).fetchone()[0]
                floor, _ = batch_floor(conn, key, camera, settings, camera_profiles)
                verdict = final_verdict(10, floor, 0)
                save_assessment(conn, {"batch_id": key, "camera_id": camera, "status": "ok", **verdict.columns()})
            out.append((key, floor, {name: value.value for name, value in metadata.items()}))
    return db, out, res


def test_one_unknown_person_on_three_cameras_at_night_is_one_visit_and_the_third_look_is_high(tmp_path):
    t = night(2, 30)
    lines = [
        *look("a", "front_door", t),
        *look("b", "driveway", t + timedelta(minutes=2)),
        *look("c", "side_gate", t + timedelta(minutes=5), zone="alley"),
        *look("d", "front_door", t + timedelta(minutes=7)),  # back at the front: same visit, no second alert
    ]
    db, batches, _ = run(tmp_path, lines)
    assert [floor.level for _, floor, _ in batches] == ["low", "medium", "high", "high"]
    third = batches[2][1]
    visit_id = batches[2][2]["visit_id"]
    assert third.score == 70 and third.reasons[0] == (
        f"visit {visit_id}: third camera in 6 minutes: front_door 02:30, driveway 02:32, side_gate 02:35 "
        "(a person not known at night) -> 70 high"
    )
    assert [meta["visit_id"] for _, _, meta in batches] == [visit_id] * 4
    assert batches[2][2]["visit_cameras"] == "front_door 02:30, driveway 02:32, side_gate 02:35"
    assert batches[2][2]["visit_level"] == "high" and batches[1][2]["visit_level"] == "medium"
    with duckdb.connect(db, read_only=True) as conn:
        visit = conn.execute("SELECT cameras, batch_count, risk_level FROM visits").fetchall()
        links = conn.execute("SELECT count(*) FROM visit_batches").fetchone()
    assert visit == [(["front_door", "driveway", "side_gate"], 4, "high")] and links == (4,)
    keys = [key for key, _, _ in batches]
    webhook = AlertWebhookResource(url=None)
    with connect(db) as conn:
        # the first look's stored verdict is not rewritten: the escalation is the visit's own row
        assert load_assessment(conn, keys[0])["risk_level"] == "low"
        assert risk_alert_for(conn, keys[1]) is None  # medium does not alert
        alert, again = risk_alert_for(conn, keys[2]), risk_alert_for(conn, keys[3])
        assert alert is not None and again is not None
        assert alert.alert_id == again.alert_id == f"{visit_id}:risk:high"
        assert alert.payload()["visit"]["cameras"] == ["front_door", "driveway", "side_gate"]
        assert alert.payload()["visit"]["level"] == "high"
        assert [webhook.raise_alert(conn, alert), webhook.raise_alert(conn, again)] == ["disabled", None]
        verdicts = {v.batch_id: v for v in unpublished_verdicts(conn, t - timedelta(days=2), 10)}
    state = state_payload(verdicts[keys[2]])
    assert (state["visit_id"], state["visit_cameras"], state["visit_level"]) == (
        visit_id,
        ["front_door", "driveway", "side_gate"],
        "high",
    )


def test_a_second_visit_the_same_night_is_high(tmp_path):
    t = night(2, 30)
    lines = [
        *look("a", "front_door", t),
        *look("b", "driveway", t + timedelta(minutes=2)),
        *look("c", "side_gate", t + timedelta(minutes=90), zone="alley"),  # back at 04:00, on one camera
    ]
    _, batches, _ = run(tmp_path, lines)
    assert [floor.level for _, floor, _ in batches] == ["low", "medium", "high"]
    first_visit, last = batches[0][2]["visit_id"], batches[2]
    assert last[2]["visit_id"] != first_visit
    assert last[1].reasons[0].startswith(f"visit {last[2]['visit_id']}: second visit tonight: {first_visit} at 02:30")


def test_harmless_visits_stay_low(tmp_path):
    resident_walk = night(1, 0)
    party = night(3, 0)
    fox = night(4, 0)
    day = night(10, 15)
    lines = [
        # a resident walking from the car to the front door at 01:00, recognised on both cameras
        *look("r1", "driveway", resident_walk, zone="drive", enrichment=known("alex")),
        *look("r2", "front_door", resident_walk + timedelta(minutes=1), zone="porch", enrichment=known("alex")),
        # two different known people on two cameras at once
        *look("k1", "driveway", party, zone="drive", enrichment=known("alex")),
        *look("k2", "garden", party, zone="lawn", enrichment=known("sam")),
        # a fox crossing the whole garden at night
        *(
            look(f"f{n}", cam, fox + timedelta(minutes=n), label="fox", zone=z, enrichment={})
            for n, (cam, z) in enumerate((("driveway", "drive"), ("garden", "lawn"), ("side_gate", "gate")))
        ),
        # the postman by day across three cameras
        *(
            look(f"p{n}", cam, day + timedelta(minutes=n), zone=z)
            for n, (cam, z) in enumerate((("front_door", "porch"), ("driveway", "drive"), ("side_gate", "gate")))
        ),
    ]
    flat = [line for item in lines for line in (item if isinstance(item, list) else [item])]
    db, batches, _ = run(tmp_path, flat)
    assert len(batches) == 10
    assert [(key.split("__")[0], floor.level) for key, floor, _ in batches if floor.level != "low"] == []
    assert all("visit visit:" not in " ".join(floor.reasons) for _, floor, _ in batches)
    visits = {meta["visit_id"] for _, _, meta in batches}
    with duckdb.connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT cameras, risk_level FROM visits ORDER BY first_ts, visit_id").fetchall()
    assert "none" in visits  # the fox makes no visit
    assert rows == [
        (["driveway", "front_door"], "low"),
        (["driveway"], "low"),
        (["garden"], "low"),
        (["front_door", "driveway", "side_gate"], "low"),
    ]
