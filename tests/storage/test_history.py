"""storage/history.py on real DuckDB files: the aggregate maintained at ingest equals the detections, re-sent ids
are not counted twice, the retention prune and the daily reconcile keep it right, and the batch queries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hsi_dagster.core.context.history import HistoryRules, history_facts
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.history import (
    activity_summary,
    bucket_floor,
    history_inputs,
    prune_activity,
    reconcile_activity,
)
from hsi_dagster.storage.ingest import ingest_lines

BATCH = datetime(2026, 12, 1, 3, 10, tzinfo=UTC)  # 03:10 UTC


def line(detection_id: str, camera: str, ts: datetime, label: str = "person", confidence: float = 0.9) -> str:
    return json.dumps(
        {
            "detection_id": detection_id,
            "camera_id": camera,
            "ts": ts.isoformat().replace("+00:00", "Z"),
            "label": label,
            "confidence": confidence,
        }
    )


def aggregate(db: Path) -> set[tuple]:
    with connect(db, read_only=True) as conn:
        return set(conn.execute("SELECT camera_id, bucket_start, label, detections FROM camera_activity").fetchall())


def from_detections(db: Path) -> set[tuple]:
    with connect(db, read_only=True) as conn:
        return set(
            conn.execute(
                """SELECT camera_id, to_timestamp(floor(epoch(ts) / 900) * 900), label, count(*)
                   FROM detections GROUP BY ALL"""
            ).fetchall()
        )


def nightly_history(days: int, hour: int, camera: str = "back_door", label: str = "person") -> list[str]:
    """One `label` detection per day at `hour`:05 UTC and a car at noon, for `days` days before BATCH's day."""
    lines = []
    for ago in range(1, days + 1):
        day = BATCH - timedelta(days=ago)
        lines.append(line(f"{camera}-{ago}-n", camera, day.replace(hour=hour, minute=5), label))
        lines.append(line(f"{camera}-{ago}-d", camera, day.replace(hour=12, minute=0), "car"))
    return lines


def test_aggregate_follows_ingest_and_resent_ids_count_once(tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    first = nightly_history(14, 3) + [line("dup", "street", BATCH), line("dup", "street", BATCH, "car")]
    ingest_lines(db, first)
    assert aggregate(db) == from_detections(db)
    # the same lines again (ON CONFLICT path) plus new ones: only the new ones count
    again = first + [line("new-1", "street", BATCH - timedelta(minutes=3)), line("new-2", "street", BATCH)]
    report = ingest_lines(db, again, chunk_lines=7)
    assert report.loaded == 2
    assert aggregate(db) == from_detections(db)
    with connect(db, read_only=True) as conn:
        street = conn.execute(
            "SELECT label, detections FROM camera_activity WHERE camera_id = 'street' AND bucket_start = ?",
            [bucket_floor(BATCH)],
        ).fetchall()
    assert street == [("person", 3)]  # dup (its first line, a person), new-1, new-2; not the re-sent car line


def test_migration_fills_the_aggregate_from_stored_detections(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    ingest_lines(db, nightly_history(3, 2))
    with connect(db) as conn:
        conn.execute("DELETE FROM camera_activity")
        conn.execute("DELETE FROM schema_migrations WHERE version = 7")
        conn.execute("DROP TABLE camera_activity")
    with connect(db) as conn:  # connect migrates
        pass
    assert aggregate(db) == from_detections(db) and aggregate(db)


def test_retention_prune_and_reconcile_keep_it_right(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    ingest_lines(db, nightly_history(20, 3))
    cutoff = BATCH - timedelta(days=16)
    with connect(db) as conn:
        pruned = prune_activity(conn, cutoff)
        assert pruned > 0
        assert conn.execute(
            "SELECT count(*) FROM camera_activity WHERE bucket_start < ?", [bucket_floor(cutoff)]
        ).fetchone() == (0,)
        # old detections dropped by hand and a stale count: the daily reconcile re-derives the window
        conn.execute("DELETE FROM detections WHERE detection_id = 'back_door-2-n'")
        conn.execute("UPDATE camera_activity SET detections = 9 WHERE label = 'car' AND bucket_start >= ?", [cutoff])
        result = reconcile_activity(conn, cutoff)
    assert result.buckets_corrected == 16 + 1  # 16 noon car buckets wrong, one person bucket gone
    with connect(db, read_only=True) as conn:
        fresh = set(
            conn.execute(
                """SELECT camera_id, to_timestamp(floor(epoch(ts) / 900) * 900), label, count(*)
                   FROM detections WHERE ts >= ? GROUP BY ALL""",
                [bucket_floor(cutoff)],
            ).fetchall()
        )
    assert aggregate(db) == fresh
    with connect(db) as conn:
        assert reconcile_activity(conn, cutoff).buckets_corrected == 0
        summary = activity_summary(conn, cutoff)
    assert {(r["camera_id"], r["label"]) for r in summary} == {("back_door", "person"), ("back_door", "car")}


def inputs_for(db: Path, camera: str = "back_door", timezone: str | None = "UTC", arrived: datetime | None = None):
    with connect(db, read_only=True) as conn:
        return history_inputs(
            conn,
            camera_id=camera,
            batch_start=BATCH,
            batch_labels=["person"],
            arrived_at=arrived or datetime.now(UTC),
            timezone=timezone,
            days=14,
            cross_camera_minutes=10,
            approached_from={"back_door": ("driveway",), "driveway": ("street",)},
            entry_points=("back_door",),
        )


def test_baseline_counts_days_in_the_local_hour(tmp_path: Path) -> None:
    db = tmp_path / "b.duckdb"
    ingest_lines(db, nightly_history(14, 3) + [line("today", "back_door", BATCH)])
    usual = history_facts(inputs_for(db))
    assert usual.days_observed == 14 and usual.enough_history
    assert [(b.label, b.days_seen) for b in usual.baselines] == [("person", 14)]
    assert usual.unusual_labels == ()
    # no other label was asked about: the car at noon is not in the batch
    assert usual.timezone == "UTC" and usual.hour_text == "03:00-04:00"


def test_local_hour_follows_the_profile_zone_across_a_dst_change(tmp_path: Path) -> None:
    """A resident home at 02:05 Paris time every night; Paris left summer time on 2026-10-25. Read in the
    profile's zone, every night counts; read as UTC (zone missing), the summer nights fall an hour earlier."""
    db = tmp_path / "dst.duckdb"
    paris = ZoneInfo("Europe/Paris")
    batch = datetime(2026, 11, 1, 2, 10, tzinfo=paris)
    nights = [
        line(f"n{ago}", "garage", datetime.combine((batch - timedelta(days=ago)).date(), time(2, 5), paris))
        for ago in range(1, 15)
    ]
    ingest_lines(db, nights)

    def facts(zone: str | None):
        with connect(db, read_only=True) as conn:
            inputs = history_inputs(
                conn,
                camera_id="garage",
                batch_start=batch,
                batch_labels=["person"],
                arrived_at=datetime.now(UTC),
                timezone=zone,
                days=14,
                cross_camera_minutes=10,
            )
        return history_facts(inputs)

    local = facts("Europe/Paris")
    assert (local.local_hour, local.baselines[0].days_seen, local.assumptions) == (2, 14, ())
    assumed = facts(None)
    assert assumed.local_hour == 1 and assumed.baselines[0].days_seen == 6  # Oct 26-31 (02:05 on the 25th: summer)
    assert assumed.assumptions == ("no time zone in the camera profile: UTC assumed",)


def test_cross_camera_path_and_verdicts(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    ingest_lines(
        db,
        [
            line("s1", "street", BATCH - timedelta(minutes=6)),
            line("d1", "driveway", BATCH - timedelta(minutes=3)),
            line("d2", "driveway", BATCH - timedelta(minutes=2), "car"),
            line("old", "street", BATCH - timedelta(minutes=30)),
            line("self", "back_door", BATCH),
        ],
    )
    facts = history_facts(inputs_for(db))
    assert [(e.camera_id, e.labels) for e in facts.recent_activity] == [
        ("street", ("person",)),
        ("driveway", ("car", "person")),
    ]
    assert facts.path_to_entry == ("street", "driveway", "back_door")
    assert facts.recent_activity[0].seconds_before == pytest.approx(360)


def test_clock_gone_back_is_said_not_used(tmp_path: Path) -> None:
    db = tmp_path / "k.duckdb"
    ingest_lines(db, nightly_history(14, 3) + [line("future", "back_door", BATCH + timedelta(hours=5))])
    facts = history_facts(inputs_for(db, arrived=datetime.now(UTC) + timedelta(minutes=1)), HistoryRules())
    assert not facts.enough_history and facts.unusual_labels == ()
    assert any("clock went back" in a for a in facts.assumptions)


def test_a_renamed_camera_keeps_its_history_through_former_ids(tmp_path: Path) -> None:
    db = tmp_path / "rename.duckdb"
    ingest_lines(db, nightly_history(14, 3, camera="porch") + [line("now", "front_door", BATCH)])

    def facts(former: tuple[str, ...]):
        with connect(db, read_only=True) as conn:
            return history_facts(
                history_inputs(
                    conn,
                    camera_id="front_door",
                    batch_start=BATCH,
                    batch_labels=["person"],
                    arrived_at=datetime.now(UTC),
                    timezone="UTC",
                    days=14,
                    cross_camera_minutes=10,
                    former_camera_ids=former,
                )
            )

    renamed = facts(())  # without the profile's former_camera_ids: a new camera, said so, nothing unusual
    assert renamed.days_observed == 0 and not renamed.enough_history and "no history" in renamed.assumptions[0]
    kept = facts(("porch",))
    assert kept.enough_history and kept.baselines[0].days_seen == 14
    assert kept.assumptions == ("history of former camera ids counted: porch",)


def test_two_rows_for_one_bucket_are_read_as_their_sum_and_folded_by_the_reconcile(tmp_path: Path) -> None:
    """Without a primary key two writers racing on a new bucket may each insert it (storage/history.py _MERGE)."""
    db = tmp_path / "race.duckdb"
    ingest_lines(db, nightly_history(14, 3))
    with connect(db) as conn:
        conn.execute(
            "INSERT INTO camera_activity SELECT * FROM camera_activity WHERE label = 'person' AND bucket_start = ?",
            [bucket_floor(BATCH - timedelta(days=1)).replace(minute=0)],
        )
        conn.execute("UPDATE camera_activity SET detections = 0 WHERE rowid = (SELECT max(rowid) FROM camera_activity)")
    assert history_facts(inputs_for(db)).baselines[0].days_seen == 14
    with connect(db) as conn:
        assert reconcile_activity(conn, BATCH - timedelta(days=20)).buckets_corrected == 1
    assert aggregate(db) == from_detections(db)
    with connect(db, read_only=True) as conn:
        doubled = "SELECT camera_id, bucket_start, label FROM camera_activity GROUP BY ALL HAVING count(*) > 1"
        assert conn.execute(f"SELECT count(*) FROM ({doubled})").fetchone() == (0,)
