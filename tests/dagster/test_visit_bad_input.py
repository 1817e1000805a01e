"""Bad input for visits through the real pipeline (tests/dagster/test_visits_pipeline.py `run`: real DuckDB, real
Dagster instances): a camera renamed mid-visit links by time like any camera and the visit lists both names; a
daemon restarted mid-visit (a new Dagster instance and new connections on the same database) links the third look
into the same visit, nothing twice, and the visit is high."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import duckdb

from hsi_dagster.assets.contexts import enriched_contexts
from tests.dagster.test_visits_pipeline import PROFILES, look, night, run

RENAMED = PROFILES + "  porch_cam: {timezone: UTC, zones: [pavement, porch], former_camera_ids: [front_door]}\n"


def rows(db: str) -> tuple[list, int, int]:
    with duckdb.connect(db, read_only=True) as conn:
        visits = conn.execute("SELECT cameras, batch_count, risk_level FROM visits").fetchall()
        links = conn.execute("SELECT count(*), count(DISTINCT batch_id) FROM visit_batches").fetchone()
    assert links is not None
    return visits, links[0], links[1]


def test_a_camera_renamed_mid_visit_links_by_time_and_the_visit_lists_both_names(tmp_path):
    t = night(2, 30)
    lines = [
        *look("a", "front_door", t),
        *look("b", "porch_cam", t + timedelta(minutes=2)),  # the same camera, renamed in Frigate
        *look("c", "driveway", t + timedelta(minutes=4)),
    ]
    db, batches, _ = run(tmp_path, lines, RENAMED)
    assert len({meta["visit_id"] for _, _, meta in batches}) == 1
    assert rows(db) == ([(["front_door", "porch_cam", "driveway"], 3, "high")], 3, 3)
    assert batches[1][2]["visit_cameras"] == "front_door 02:30, porch_cam 02:32"


def test_a_daemon_restarted_mid_visit_loses_nothing_and_links_nothing_twice(tmp_path):
    t = night(2, 30)
    first = [*look("a", "front_door", t), *look("b", "driveway", t + timedelta(minutes=2))]
    db, before, res = run(tmp_path, first)  # the daemon links two looks, then stops (its instance is gone)
    assert rows(db) == ([(["front_door", "driveway"], 2, "medium")], 2, 2)
    third = look("c", "side_gate", t + timedelta(minutes=5), zone="alley")
    _, after, _ = run(tmp_path, third)  # restarted: a new instance, new connections, the same database
    assert len(after) == 1 and after[0][0] not in {key for key, _, _ in before}
    assert after[0][1].level == "high"
    assert after[0][2]["visit_id"] == before[0][2]["visit_id"]
    with dg.instance_for_test() as instance:  # and a run of the first look retried after the restart
        instance.add_dynamic_partitions("batches", [before[0][0]])
        again = dg.materialize([enriched_contexts], partition_key=before[0][0], instance=instance, resources=res)
        assert again.success
    assert rows(db) == ([(["front_door", "driveway", "side_gate"], 3, "high")], 3, 3)
