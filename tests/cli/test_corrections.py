"""`hsi correct` and `hsi corrections` through main(), on a real DuckDB file in tmp_path."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from tests.support.verdicts import save_verdict


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    from hsi_dagster.settings import HsiSettings

    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    path = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(path))
    now = datetime.now(UTC)
    save_verdict(path, "yard-1", "yard", 45, now - timedelta(minutes=3))
    save_verdict(path, "yard-2", "yard", 20, now - timedelta(minutes=2))
    save_verdict(path, "door-1", "door", 70, now - timedelta(minutes=1))
    return path


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_correct_stores_once_and_lists_newest_first(capsys: pytest.CaptureFixture, db: Path) -> None:
    code, out, _ = run(capsys, "correct", "yard-1", "low", "--note", "the neighbour's car")
    assert code == 0 and out.strip() == "stored: yard-1 (yard) medium 45 -> low (lower)"
    code, out, _ = run(capsys, "correct", "yard-1", "low")
    assert code == 0 and out.startswith("already stored: yard-1")
    assert run(capsys, "correct", "yard-2", "high")[0] == 0
    assert run(capsys, "correct", "door-1", "critical")[0] == 0

    code, out, _ = run(capsys, "corrections")
    lines = out.splitlines()
    assert code == 0
    assert "door-1 high -> critical (higher, cli)" in lines[0]
    assert "yard-2 low -> high (higher, cli)" in lines[1]
    assert "yard-1 medium -> low (lower, cli): the neighbour's car" in lines[2]
    assert "door: 1 verdicts corrected (1 higher)" in lines
    assert "yard: 2 verdicts corrected (1 lower, 1 higher)" in lines

    code, out, _ = run(capsys, "corrections", "--json")
    listed = json.loads(out)
    assert [r["batch_id"] for r in listed["corrections"]] == ["door-1", "yard-2", "yard-1"]
    assert listed["per_camera"] == {"door": {"higher": 1}, "yard": {"higher": 1, "lower": 1}}


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (("correct", "nope", "low"), "batch_id: unknown batch 'nope'"),
        (("correct", "yard-1", "severe"), "level: 'severe' is not one of low, medium, high, critical"),
        (("correct", "yard-1", "low", "--note", "x" * 501), "note: 501 characters, at most 500"),
    ],
)
def test_a_refused_correction_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture, db: Path, argv: tuple[str, ...], reason: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and reason in err and "Traceback" not in err
    code, out, _ = run(capsys, "corrections")
    assert "refused (cli" in out and reason.split(":")[0] in out
    assert " -> " not in out  # nothing stored


def test_corrections_on_an_empty_database(capsys: pytest.CaptureFixture, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(tmp_path / "none.duckdb"))
    code, out, _ = run(capsys, "corrections")
    assert code == 0 and out.startswith("no corrections yet")


def test_correct_on_a_missing_database_exits_2_and_creates_nothing(
    capsys: pytest.CaptureFixture, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    missing = tmp_path / "typo.duckdb"
    code, _, err = run(capsys, "correct", "yard-1", "low", "--db", str(missing))
    assert code == 2 and f"no database at {missing}" in err and not missing.exists()
