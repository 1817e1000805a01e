"""A short household fortnight (tests/support/household_fortnight.py, the code bench/household_fortnight.py runs):
five nights through the pipeline's storage and floor, corrections from Home Assistant through a real mosquitto.
The neighbour's car stops alarming once the household marked it harmless HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS
times, every real threat stays high or critical, the resident without face recognition (an unknown person at an
entry zone at night) is never exempted; then `hsi eval --household` replays that database faithfully and moves
with the exceptions' setting."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.settings import HsiSettings
from tests.support.household_fortnight import (
    CAR_DOOR_NIGHTS,
    STRANGER_NIGHTS,
    THREAT_LEVELS,
    Fortnight,
    fortnight_start,
    run_fortnight,
    settings_for,
)
from tests.support.mosquitto import Mosquitto, running_broker

NIGHTS = 5


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    with running_broker(tmp_path_factory.mktemp("broker")) as server:
        yield server


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> tuple[Fortnight, Fortnight, Path]:
    folder = tmp_path_factory.mktemp("fortnight")
    start = fortnight_start(NIGHTS)
    before = run_fortnight(folder / "before.duckdb", NIGHTS, start, None)
    after = run_fortnight(folder / "after.duckdb", NIGHTS, start, broker)
    return before, after, folder / "after.duckdb"


def test_the_neighbours_car_stops_alarming_after_the_thresholds_corrections(runs) -> None:
    before, after, db = runs
    threshold = settings_for(db).HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS
    assert threshold < NIGHTS
    nights = range(1, NIGHTS + 1)
    assert [before.false_alarms(n, "neighbour's car") for n in nights] == [1] * NIGHTS  # never corrected: every night
    assert [after.false_alarms(n, "neighbour's car") for n in nights] == [1] * threshold + [0] * (NIGHTS - threshold)
    first_exempt = next(j for j in after.judged if j.event.name == "neighbour's car" and j.event.night == threshold + 1)
    assert first_exempt.level == "low"
    assert f"lifted: the household marked {threshold} similar events harmless" in first_exempt.reasons[0]
    assert [e.pattern.key for e in after.exceptions] == ["drive|car|driveway|22|"]
    # the household pressed Home Assistant's "false alarm" button only while the car alarmed
    car = [c for c in after.corrections if c["camera_id"] == "drive"]
    assert len(car) == threshold and {(c["source"], c["level"], c["direction"]) for c in car} == {
        ("mqtt", "low", "lower")
    }
    assert all(c["note"].startswith("Home Assistant button") for c in car)  # the discovered button's payload
    assert after.refusals == []


def test_every_real_threat_stays_high_or_critical(runs) -> None:
    before, after, _ = runs
    threats = [j for j in after.judged if j.event.threat]
    expected = {n for n in STRANGER_NIGHTS | CAR_DOOR_NIGHTS if n <= NIGHTS}
    assert {j.event.night for j in threats} == expected and len(threats) == len(expected)
    assert all(j.level in THREAT_LEVELS for j in threats), [(j.event.batch_id, j.level) for j in threats]
    # the car-door thief is on the driveway in the exempted car's hour band: a probing rule, never lifted
    thief = next(j for j in threats if j.event.name == "car doors tried")
    assert thief.reasons[0].startswith("probing:") and not any("lifted" in r for r in thief.reasons)
    assert [(j.event.batch_id, j.level) for j in before.judged if j.event.threat] == [
        (j.event.batch_id, j.level) for j in threats
    ]
    confirmed = [c for c in after.corrections if c["camera_id"] == "back"]
    assert [(c["level"], c["direction"]) for c in confirmed] == [("high", "confirmed")]


def test_an_unknown_person_at_the_door_at_night_is_never_exempted(runs) -> None:
    _, after, _ = runs
    resident = [j for j in after.judged if j.event.name == "resident, no face"]
    assert [j.level for j in resident] == ["high"] * NIGHTS  # corrected to low every night, still high
    assert all(not any("lifted" in r for r in j.reasons) for j in resident)
    assert [c["level"] for c in after.corrections if c["camera_id"] == "front"] == ["low"] * NIGHTS
    [refused] = after.refused
    assert refused.pattern.key == "front|person|door|0|" and refused.corrections == NIGHTS
    assert "never exempt unless a recogniser named them" in refused.reason


def _household_eval(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: Path, **env: str) -> str:
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["eval", "--household", "--floor-only"]) == 0
    return capsys.readouterr().out


def _figures(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if f"{name}:" in line).split(":", 1)[1]


def test_the_household_eval_of_the_fortnight_is_faithful_and_moves_with_the_exceptions(
    runs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, after, db = runs
    corrected = len(after.corrections)
    out = _household_eval(monkeypatch, capsys, db)
    assert f"{corrected} corrected batches on 3 camera(s): back, drive, front" in out
    assert f"replayed floor = stored floor on {corrected} of {corrected} batches" in out and "differs" not in out
    assert _figures(out, "household.floor") == _figures(out, "household.stored-floor")
    assert _figures(out, "household.floor") == _figures(out, "household.stored")

    # an exception after two corrections: the third night's car, stored medium, replays low
    out = _household_eval(monkeypatch, capsys, db, HOUSEHOLD_EXCEPTION_MIN_CORRECTIONS="2")
    assert f"replayed floor = stored floor on {corrected - 1} of {corrected} batches" in out
    assert "differs: drive-n03-2330: stored floor 45, replayed 0" in out
    assert _figures(out, "household.floor") != _figures(out, "household.stored-floor")
