"""Household exceptions from stored corrections and contexts in a real DuckDB file, and `hsi exceptions`."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.core.outbound.corrections import check_request
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.core.verdict.exceptions import ExceptionPolicy
from hsi_dagster.storage.corrections import correct
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.exceptions import household_exceptions, remove_exception
from hsi_dagster.storage.pipeline_tables import save_context
from tests.core.verdict.test_exceptions import context
from tests.support.verdicts import save_verdict

NOW = datetime.now(UTC)
NIGHT = datetime(NOW.year, NOW.month, NOW.day, 23, 30, tzinfo=UTC) - timedelta(days=10)


def store(db: Path, batch_id: str, start: datetime, level: str = "low", **kwargs) -> None:
    save_verdict(db, batch_id, "drive", 45, start)
    with connect(db) as conn:
        save_context(conn, batch_id, context(batch_id, start, **kwargs).to_json(), "full", [])
        correct(conn, check_request(batch_id, level, source="cli"), NOW - timedelta(days=5) + (start - NIGHT))


def exceptions_in(db: Path):
    with connect(db, read_only=True) as conn:
        return household_exceptions(conn, EvidenceRules(), ExceptionPolicy(3, 30), NOW)


def test_three_corrected_nights_make_an_exception_that_can_be_removed(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    for i in range(3):
        store(db, f"car-{i}", NIGHT + timedelta(days=i))
    store(db, "car-x", NIGHT + timedelta(days=3), level="high")  # the household said high: not harmless
    (exception,), refused, skipped = exceptions_in(db)
    assert exception.corrections == 3 and refused == [] and skipped == []
    with connect(db) as conn:
        remove_exception(conn, exception.pattern.key, NOW)
    assert exceptions_in(db)[0] == []


def test_a_batch_corrected_low_then_high_does_not_count(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    for i in range(3):
        store(db, f"car-{i}", NIGHT + timedelta(days=i))
    with connect(db) as conn:
        correct(conn, check_request("car-2", "high", source="cli"), NOW)  # changed their mind
    assert exceptions_in(db)[0] == []


def test_hsi_exceptions_lists_refuses_and_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hsi_dagster.settings import HsiSettings

    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    for i in range(3):
        store(db, f"car-{i}", NIGHT + timedelta(days=i))
        store(db, f"man-{i}", NIGHT + timedelta(days=i, minutes=1), label="person", zone="door")
    assert main(["exceptions"]) == 0
    out = capsys.readouterr().out
    assert "the household marked 3 similar events harmless (drive: car on driveway, 22-24h)" in out
    assert "not an exception: drive: person on door, 22-24h (3 corrections): an unknown person at an entry zone" in out
    listed = json.loads((main(["exceptions", "--json"]), capsys.readouterr().out)[1])
    (key,) = [row["key"] for row in listed["exceptions"]]
    assert main(["exceptions", "--remove", key]) == 0 and "removed" in capsys.readouterr().out
    assert main(["exceptions", "--remove", key]) == 2
    assert "no exception in force" in capsys.readouterr().err
    assert main(["exceptions"]) == 0 and "the household marked" not in capsys.readouterr().out
