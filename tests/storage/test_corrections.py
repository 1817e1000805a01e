"""Corrections stored in a real DuckDB file: once per correction, the verdict they named kept, refusals counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.core.outbound.corrections import LATEST, CorrectionRefused, check_request
from hsi_dagster.storage.corrections import (
    correct,
    corrected_batch_ids,
    correction_counts,
    corrections,
    refusal_counts,
)
from hsi_dagster.storage.db import connect
from tests.support.verdicts import save_verdict

NOW = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "hsi.duckdb"
    save_verdict(path, "yard-1", "yard", 45, NOW - timedelta(minutes=5))  # medium
    save_verdict(path, "yard-2", "yard", 10, NOW - timedelta(minutes=1))  # low, the newest
    save_verdict(path, "door-1", "door", 70, NOW - timedelta(minutes=3))  # high
    return path


def test_the_same_correction_twice_is_one_row(db: Path) -> None:
    request = check_request("yard-1", "low", "the neighbour's car", source="cli")
    with connect(db) as conn:
        first, new = correct(conn, request, NOW)
        again, new_again = correct(conn, request, NOW + timedelta(seconds=5))
        rows = corrections(conn)
    assert (new, new_again) == (True, False)
    assert len(rows) == 1
    row = rows[0]
    assert (row["batch_id"], row["verdict_level"], row["verdict_score"], row["level"], row["direction"]) == (
        "yard-1",
        "medium",
        45,
        "low",
        "lower",
    )
    assert (row["source"], row["note"], row["current"]) == ("cli", "the neighbour's car", True)
    assert first.verdict == again.verdict


def test_a_batch_assessed_again_keeps_the_correction_of_the_verdict_it_named(db: Path) -> None:
    with connect(db) as conn:
        correct(conn, check_request("yard-1", "low", source="cli"), NOW)
    save_verdict(db, "yard-1", "yard", 90, NOW + timedelta(minutes=1))  # re-assessed: critical now
    with connect(db) as conn:
        (row,) = corrections(conn)
        assert (row["verdict_level"], row["verdict_score"], row["current"]) == ("medium", 45, False)
        # the same correction sent now names the new verdict: a second row, the first untouched
        correction, new = correct(conn, check_request("yard-1", "low", source="cli"), NOW + timedelta(minutes=2))
        assert new and correction.verdict.risk_level == "critical"
        rows = corrections(conn)
    assert [(r["verdict_level"], r["current"]) for r in rows] == [("critical", True), ("medium", False)]


def test_refusals_are_counted_by_field_and_nothing_is_stored(db: Path) -> None:
    with connect(db) as conn:
        with pytest.raises(CorrectionRefused, match="batch_id: unknown batch 'nope'"):
            correct(conn, check_request("nope", "low", source="cli"), NOW)
        with pytest.raises(CorrectionRefused, match="camera: unknown camera 'garage'"):
            correct(conn, check_request("yard-1", "low", source="mqtt"), NOW, camera_slug="garage")
        with pytest.raises(CorrectionRefused, match="camera: batch 'door-1' belongs to 'door'"):
            correct(conn, check_request("door-1", "low", source="mqtt"), NOW, camera_slug="yard")
        with pytest.raises(CorrectionRefused, match="batch_id: 'latest' needs a camera"):
            correct(conn, check_request(LATEST, "low", source="cli"), NOW)
        assert corrections(conn) == []
        counts = {(r["source"], r["field"]): r["refused"] for r in refusal_counts(conn)}
    assert counts == {("cli", "batch_id"): 2, ("mqtt", "camera"): 2}


def test_latest_names_the_cameras_newest_verdict(db: Path) -> None:
    with connect(db) as conn:
        correction, _ = correct(conn, check_request(LATEST, "high", source="mqtt"), NOW, camera_slug="yard")
    assert correction.verdict.batch_id == "yard-2" and correction.direction == "higher"


def test_the_rate_per_camera_is_bounded(db: Path) -> None:
    with connect(db) as conn:
        for i, level in enumerate(["low", "medium", "high"]):
            correct(
                conn,
                check_request("yard-1", level, source="mqtt"),
                NOW + timedelta(seconds=i),
                camera_slug="yard",
                per_hour=3,
            )
        with pytest.raises(CorrectionRefused, match="rate: camera 'yard' had 3 corrections"):
            correct(conn, check_request("yard-2", "low", source="mqtt"), NOW, camera_slug="yard", per_hour=3)
        # another camera has its own bound, and an hour later the camera may correct again
        correct(conn, check_request("door-1", "low", source="mqtt"), NOW, camera_slug="door", per_hour=3)
        correct(
            conn,
            check_request("yard-2", "low", source="mqtt"),
            NOW + timedelta(hours=1, seconds=3),
            camera_slug="yard",
            per_hour=3,
        )
        assert len(corrections(conn)) == 5


def test_counts_per_camera_follow_the_latest_correction_of_each_batch(db: Path) -> None:
    with connect(db) as conn:
        correct(conn, check_request("yard-1", "high", source="cli"), NOW)
        correct(conn, check_request("yard-1", "low", source="cli"), NOW + timedelta(seconds=1))  # changed their mind
        correct(conn, check_request("yard-2", "critical", source="dagster"), NOW)
        correct(conn, check_request("door-1", "high", source="cli"), NOW)
        assert correction_counts(conn) == {"door": {"confirmed": 1}, "yard": {"higher": 1, "lower": 1}}
        assert corrected_batch_ids(conn) == {"yard-1", "yard-2", "door-1"}
        assert corrected_batch_ids(conn, ["yard-1", "other"]) == {"yard-1"}


def test_a_database_before_migration_38_reads_as_no_corrections(tmp_path: Path) -> None:
    import duckdb

    path = tmp_path / "old.duckdb"
    duckdb.connect(str(path)).close()
    with duckdb.connect(str(path), read_only=True) as conn:
        assert corrections(conn) == [] and correction_counts(conn) == {} and refusal_counts(conn) == []
        assert corrected_batch_ids(conn) == set()
