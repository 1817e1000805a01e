"""storage/visits.py on real DuckDB files: linking is keyed by batch (again links nothing twice), the visit row
carries its cameras, span, identities and sightings, a visit's level is only ever raised, and a batch out of reach
starts its own visit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hsi_dagster.core.visits.linking import VisitRules
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.visits import (
    link_batch,
    record_visit_level,
    visit_batch_ids,
    visit_of_batch,
    visits_before,
    visits_sharing_names,
)
from tests.core.visits.helpers import LONDON_NIGHT, sighting

MIN = timedelta(minutes=1)
NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


def test_three_looks_make_one_stored_visit_and_a_retry_links_nothing_twice(tmp_path):
    db = tmp_path / "hsi.duckdb"
    rules = VisitRules()
    looks = [
        sighting("front_door", LONDON_NIGHT, identities=("stranger-7",)),
        sighting("driveway", LONDON_NIGHT + 2 * MIN),
        sighting("side_gate", LONDON_NIGHT + 5 * MIN),
    ]
    with connect(db) as conn:
        results = [link_batch(conn, look, rules, NOW) for look in looks]
        again = link_batch(conn, looks[1], rules, NOW + MIN)
        row = conn.execute(
            "SELECT visit_id, cameras, batch_count, identities, is_unknown, first_ts, last_ts FROM visits"
        ).fetchall()
        links = conn.execute("SELECT count(*) FROM visit_batches").fetchone()
    assert [linked for _, linked, _ in results] == [True, True, True]
    assert again[1] is False and again[0].visit_id == "visit:front_door-023000"
    assert again[2].startswith("within 300 s")
    assert links == (3,)
    assert row == [
        (
            "visit:front_door-023000",
            ["front_door", "driveway", "side_gate"],
            3,
            ["stranger-7"],
            True,
            LONDON_NIGHT,
            LONDON_NIGHT + 5 * MIN + timedelta(seconds=20),
        )
    ]
    with connect(db, read_only=True) as conn:
        stored = visit_of_batch(conn, looks[2].batch_id)
        assert sorted(visit_batch_ids(conn, "visit:front_door-023000")) == sorted(look.batch_id for look in looks)
    assert stored is not None and stored.sightings == tuple(looks)


def test_a_visits_level_is_only_raised(tmp_path):
    db = tmp_path / "hsi.duckdb"
    with connect(db) as conn:
        visit, _, _ = link_batch(conn, sighting("front_door", LONDON_NIGHT), VisitRules(), NOW)
        assert record_visit_level(conn, visit.visit_id, 45, "medium", ["second camera"], NOW)
        assert record_visit_level(conn, visit.visit_id, 70, "high", ["third camera"], NOW)
        assert not record_visit_level(conn, visit.visit_id, 45, "medium", ["calmer"], NOW)
        stored = visit_of_batch(conn, "front_door-023000")
    assert stored is not None and (stored.score, stored.level, stored.reasons) == (70, "high", ("third camera",))


def test_a_batch_out_of_reach_or_another_known_person_is_its_own_visit(tmp_path):
    db = tmp_path / "hsi.duckdb"
    with connect(db) as conn:
        link_batch(conn, sighting("driveway", LONDON_NIGHT, unknown=0, known=("resident:alex",)), VisitRules(), NOW)
        sam, _, why = link_batch(
            conn, sighting("garden", LONDON_NIGHT, unknown=0, known=("resident:sam",)), VisitRules(), NOW
        )
        later, _, _ = link_batch(
            conn, sighting("driveway", LONDON_NIGHT + 20 * MIN, batch_id="late"), VisitRules(), NOW
        )
        count = conn.execute("SELECT count(*) FROM visits").fetchone()
    assert sam.visit_id == "visit:garden-023000" and "different known people" in why
    assert later.visit_id == "visit:late" and count == (3,)
    assert visit_of_batch_missing(db)


def visit_of_batch_missing(db) -> bool:
    with connect(db, read_only=True) as conn:
        return visit_of_batch(conn, "never-linked") is None


def test_the_visits_before_one_are_those_of_the_last_hours_with_a_stranger(tmp_path):
    db = tmp_path / "hsi.duckdb"
    rules = VisitRules()
    with connect(db) as conn:
        old, _, _ = link_batch(conn, sighting("street", LONDON_NIGHT - 13 * 60 * MIN, batch_id="old"), rules, NOW)
        link_batch(conn, sighting("drive", LONDON_NIGHT - 60 * MIN, unknown=0, known=("resident:alex",)), rules, NOW)
        first, _, _ = link_batch(conn, sighting("front_door", LONDON_NIGHT, batch_id="first"), rules, NOW)
        second, _, _ = link_batch(conn, sighting("side_gate", LONDON_NIGHT + 90 * MIN, batch_id="second"), rules, NOW)
        before = visits_before(conn, second, timedelta(hours=12))
    assert [v.visit_id for v in before] == [first.visit_id]  # not the resident's, not yesterday's
    assert old.visit_id not in {v.visit_id for v in before}


def test_the_weeks_visits_sharing_a_plate_are_read_by_name_and_bounded(tmp_path):
    rules = VisitRules()
    plate = ("AB12CDE",)
    looks = [
        sighting("driveway", LONDON_NIGHT - timedelta(days=8), plates=plate, batch_id="too-old"),
        sighting("driveway", LONDON_NIGHT - timedelta(days=3), plates=plate, batch_id="mon"),
        sighting("driveway", LONDON_NIGHT - timedelta(days=2), plates=("ZZ99ZZZ",), batch_id="other-car"),
        sighting("driveway", LONDON_NIGHT - timedelta(days=1), identities=("stranger-7",), batch_id="tue"),
        sighting("driveway", LONDON_NIGHT, plates=plate, batch_id="now"),
    ]
    with connect(tmp_path / "hsi.duckdb") as conn:
        linked = [link_batch(conn, look, rules, NOW)[0] for look in looks]
        now = linked[-1]
        found = visits_sharing_names(conn, now, ["plate:AB12CDE", "stranger-7"], timedelta(days=7))
        assert [v.visit_id for v in found] == ["visit:mon", "visit:tue"]
        assert visits_sharing_names(conn, now, ["plate:AB12CDE"], timedelta(days=7), limit=1)[0].visit_id == "visit:mon"
        assert visits_sharing_names(conn, now, [], timedelta(days=7)) == []
