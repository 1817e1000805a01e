"""`hsi eval --household --floor-only` on a real DuckDB file: corrected batches with stored contexts and the floor
verdicts production stored (a household exception included); the replay gives back the stored floors and the same
figures with the configuration unchanged, and different ones after a setting that moves the floor."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.core.outbound.corrections import check_request
from hsi_dagster.evaluation.stored_floor import batch_floor
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.storage.corrections import correct
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import save_context
from tests.core.verdict.test_exceptions import WATCHED, context
from tests.support.llm_fixtures import RunningLlama
from tests.support.verdicts import save_verdict

NOW = datetime.now(UTC)
NIGHT = datetime(NOW.year, NOW.month, NOW.day, 23, 30, tzinfo=UTC) - timedelta(days=10)


def judge_and_correct(db: Path, batch_id: str, start: datetime, level: str, **kwargs) -> None:
    """A batch stored as the pipeline stores it: its context, then its floor verdict judged an hour after it (with
    the exceptions in force then), then the household's correction a day later."""
    assessed = start + timedelta(hours=1)
    with connect(db) as conn:
        save_context(conn, batch_id, context(batch_id, start, profile=WATCHED, **kwargs).to_json(), "full", [])
        floor, _ = batch_floor(conn, batch_id, "drive", load_settings(os.devnull), {}, now=assessed)
    save_verdict(
        db, batch_id, "drive", floor.score, assessed, floor_score=floor.score, floor_reasons=list(floor.reasons)
    )
    with connect(db) as conn:
        correct(conn, check_request(batch_id, level, source="cli"), start + timedelta(days=1))


def household(capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["eval", "--household", "--floor-only"]) == 0
    return capsys.readouterr().out


def test_the_replay_is_faithful_and_moves_with_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    # the neighbour's car five nights running, marked harmless: from the fourth night an exception lifts the floor
    for night in range(5):
        judge_and_correct(db, f"car-{night}", NIGHT + timedelta(days=night), "low")
    # a stranger at the door at night, confirmed high; one by day the household called low
    judge_and_correct(db, "man-night", NIGHT + timedelta(days=5, minutes=5), "high", label="person", zone="door")
    judge_and_correct(db, "man-day", NIGHT + timedelta(days=5, hours=-10), "low", label="person", zone="door")
    with connect(db, read_only=True) as conn:
        stored = dict(conn.execute("SELECT batch_id, floor_score FROM risk_assessments").fetchall())
    assert [stored[f"car-{n}"] for n in range(5)] == [45, 45, 45, 0, 0]  # the exception, from the fourth night
    assert (stored["man-night"], stored["man-day"]) == (70, 0)

    out = household(capsys)
    assert "7 corrected batches on 1 camera(s): drive" in out
    assert "replayed floor = stored floor on 7 of 7 batches" in out and "differs" not in out
    replayed = next(line for line in out.splitlines() if "household.floor:" in line).split(":", 1)[1]
    as_stored = next(line for line in out.splitlines() if "household.stored-floor:" in line).split(":", 1)[1]
    assert replayed == as_stored
    assert "level accuracy 57%" in replayed  # 4 of 7: the three nights before the exception were medium

    # night starts at 00:00 from now on: 23:30 is evening, the presence rules stop firing, the figures move
    monkeypatch.setenv("EVIDENCE_NIGHT_START_HOUR", "0")
    out = household(capsys)
    assert "replayed floor = stored floor on 3 of 7 batches" in out
    assert "differs: man-night: stored floor 70, replayed 0" in out
    replayed = next(line for line in out.splitlines() if "household.floor:" in line).split(":", 1)[1]
    as_stored = next(line for line in out.splitlines() if "household.stored-floor:" in line).split(":", 1)[1]
    assert replayed != as_stored and "under-call 100%" in replayed


def test_no_database_or_no_corrections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(tmp_path / "none.duckdb"))
    assert main(["eval", "--household", "--floor-only"]) == 2
    assert not (tmp_path / "none.duckdb").exists()
    assert main(["eval", "--household", "--split", "holdout"]) == 2
    save_verdict(tmp_path / "none.duckdb", "b", "drive", 10, NOW)
    assert main(["eval", "--household", "--floor-only"]) == 0
    assert "no corrected batch" in capsys.readouterr().out


@pytest.mark.timeout(1500)  # one completion, which a busy 2-core machine can take minutes over
def test_a_model_pass_replays_with_productions_trust_and_says_the_household_is_too_small_to_measure_one(
    llama_server: RunningLlama, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hsi eval --household --endpoint URL` against the real embedded server: every corrected batch through the
    prompt and the model, stored with the trust production applies (the shipped measurement of SmolLM2: 0), and the
    household's own trust sweep NOT stored with one correction, saying how many it needs."""
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    judge_and_correct(db, "man-night", NIGHT + timedelta(minutes=5), "high", label="person", zone="door")
    assert main(["eval", "--household", "--endpoint", llama_server.url]) == 0
    out = capsys.readouterr().out
    assert "household.model:" in out and "household.with-floor:" in out
    assert "trust applied: 0 (measured trust 0 (shipped" in out
    assert (
        "household trust: not stored (the labeled set's measurement stands): 1 corrected batches (0 harmless, 1 high "
        in out
    )
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM household_trust").fetchone() == (0,)
