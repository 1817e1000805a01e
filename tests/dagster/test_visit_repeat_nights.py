"""Repeat visits over nights through the real pipeline (tests/dagster/test_visits_pipeline.py `run`: real DuckDB,
real Dagster instance, detection_batches + enriched_contexts materialized, the floor computed by `batch_floor`): the
same unknown plate at night on a second night is medium, on a third high when the car comes onto the driveway (medium
in the street), the reason listing the nights; a household
plate fires nothing; a household exception for the pattern (two corrections to low, through storage/corrections.py
and the exceptions' own matching) keeps the third night as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hsi_dagster.core.outbound.corrections import check_request
from hsi_dagster.storage.corrections import correct
from hsi_dagster.storage.db import connect
from tests.dagster.test_visits_pipeline import PROFILES, look, run


def nights_ago(days: int, hour: int, minute: int) -> datetime:
    day = datetime.now(UTC).date() - timedelta(days=days)
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def car(prefix: str, at: datetime, plate: str = "AB12CDE", zone: str = "drive") -> list[str]:
    """A car read by LPR, parked 20 s on the driveway (or in the street), no person."""
    return look(prefix, "driveway", at, label="car", zone=zone, enrichment={"vehicle": {"type": "car", "plate": plate}})


NIGHTS = (nights_ago(5, 2, 10), nights_ago(3, 2, 40), nights_ago(2, 2, 30))


def test_the_same_unknown_plate_on_a_second_night_is_medium_and_on_a_third_high(tmp_path):
    lines = [line for n, at in enumerate(NIGHTS) for line in car(f"n{n}", at)]
    _, batches, _ = run(tmp_path, lines)
    repeat = [[r for r in floor.reasons if "night this week" in r] for _, floor, _ in batches]
    assert repeat[0] == []
    when = [f"{at:%a %H:%M}" for at in NIGHTS]
    assert repeat[1] and f"second night this week: plate AB12CDE ({when[0]}, {when[1]})" in repeat[1][0]
    assert repeat[1][0].endswith("-> 45 medium")
    assert repeat[2] and f"third night this week: plate AB12CDE ({', '.join(when)})" in repeat[2][0]
    assert repeat[2][0].endswith("-> 70 high") and batches[2][1].score >= 70


def test_the_same_car_parked_in_the_street_every_night_is_noticed_never_an_alert(tmp_path):
    """The neighbour's car read on the pavement at night three times this week: medium, never high, every night."""
    lines = [line for n, at in enumerate(NIGHTS) for line in car(f"n{n}", at, zone="pavement")]
    _, batches, _ = run(tmp_path, lines)
    third = [r for r in batches[2][1].reasons if "night this week" in r]
    assert third and "third night this week: plate AB12CDE" in third[0] and third[0].endswith("-> 45 medium")
    assert [floor.level for _, floor, _ in batches] == ["low", "medium", "medium"]


def test_a_household_plate_on_three_nights_fires_nothing(tmp_path):
    lines = [line for n, at in enumerate(NIGHTS) for line in car(f"n{n}", at, plate="KX73ABC")]
    _, batches, _ = run(tmp_path, lines, PROFILES, KNOWN_PLATES="KX73ABC")
    assert all("night this week" not in " ".join(floor.reasons) for _, floor, _ in batches)


def test_a_household_exception_for_the_pattern_keeps_the_third_night_as_it_was(tmp_path):
    settings = {"HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS": "2"}
    db, first_two, _ = run(tmp_path, [*car("n0", NIGHTS[0]), *car("n1", NIGHTS[1])], PROFILES, **settings)
    with connect(db) as conn:  # the household says: that car is harmless (twice: an exception)
        for batch_id, _, _ in first_two:
            correct(conn, check_request(batch_id, "low", source="cli"), datetime.now(UTC))
    _, batches, _ = run(tmp_path, car("n2", NIGHTS[2]), PROFILES, **settings)
    third = batches[-1][1]
    assert "night this week" not in " ".join(third.reasons)
    assert any("the household marked 2 similar events harmless" in r for r in third.reasons + third.ignored)
