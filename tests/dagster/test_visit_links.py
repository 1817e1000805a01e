"""Links stronger where more is known, through the real pipeline (tests/dagster/test_visits_pipeline.py `run`: real
DuckDB, real Dagster instance, detection_batches + enriched_contexts materialized): a camera profile's
`approached_from` and a Frigate camera group (FRIGATE_CONFIG_PATH) link a look 8 minutes later on the neighbour
camera into the visit, and the visit's metadata says why each batch joined it; without a graph the same looks are
two visits."""

from __future__ import annotations

from datetime import timedelta

import duckdb

from tests.dagster.test_visits_pipeline import PROFILES, look, night, run

NEIGHBOURS = PROFILES.replace(
    "side_gate: {timezone: UTC, zones: [alley, gate], entry_zones: [gate]}",
    "side_gate: {timezone: UTC, zones: [alley, gate], entry_zones: [gate], approached_from: [front_door]}",
)


def lines() -> list[str]:
    t = night(2, 30)
    return [*look("a", "front_door", t), *look("b", "side_gate", t + timedelta(minutes=8), zone="alley")]


def visits(db: str) -> list[tuple]:
    with duckdb.connect(db, read_only=True) as conn:
        return conn.execute("SELECT cameras, batch_count FROM visits ORDER BY first_ts").fetchall()


def test_a_profiles_neighbour_links_a_look_eight_minutes_later_and_the_metadata_says_why(tmp_path):
    db, batches, _ = run(tmp_path, lines(), NEIGHBOURS)
    assert visits(db) == [(["front_door", "side_gate"], 2)]
    meta = batches[1][2]
    assert meta["visit_id"] == batches[0][2]["visit_id"]
    assert meta["visit_links"] == (
        f"front_door {batches[0][0]}: first; side_gate {batches[1][0]}: neighbour front_door->side_gate"
    )
    assert any("second camera in 9 minutes: front_door 02:30, side_gate 02:38" in r for r in batches[1][1].reasons)


def test_a_frigate_camera_group_links_the_same_looks(tmp_path):
    frigate = tmp_path / "frigate.yml"
    frigate.write_text(
        "cameras: {front_door: {}, side_gate: {}, driveway: {}}\n"
        "camera_groups: {front: {cameras: [front_door, side_gate], icon: LuDoorOpen, order: 1}}\n"
    )
    db, batches, _ = run(tmp_path, lines(), PROFILES, FRIGATE_CONFIG_PATH=str(frigate))
    assert visits(db) == [(["front_door", "side_gate"], 2)]
    assert batches[1][2]["visit_links"].endswith("side_gate " + batches[1][0] + ": camera group front")


def test_without_a_graph_the_same_looks_are_two_visits(tmp_path):
    db, batches, _ = run(tmp_path, lines())
    assert visits(db) == [(["front_door"], 1), (["side_gate"], 1)]
    assert batches[1][2]["visit_link"] == "new visit"  # no visit within reach: none read
