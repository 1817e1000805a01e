"""`hsi` (contract section 4): argument and input errors exit non-zero with a clear message; ingest and batches
print what the contract promises for a small hand-written input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from hsi_dagster.cli.main import main

REPO = Path(__file__).resolve().parents[2]
HSI_SCRIPT = Path(sys.executable).parent / "hsi"
COMMANDS = (
    "ingest",
    "batches",
    "process",
    "simulate",
    "llm",
    "plan",
    "config",
    "metrics",
    "demo",
    "eval",
    "frigate",
    "mqtt",
    "correct",
    "corrections",
    "exceptions",
)


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The database of every test is in tmp_path; `--db` writes os.environ, monkeypatch restores it afterwards."""
    from hsi_dagster.settings import HsiSettings

    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    db = tmp_path / "hsi.duckdb"
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    monkeypatch.chdir(tmp_path)
    return db


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """hsi.main(argv) -> (exit code, stdout, stderr); argparse errors exit through SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _record(detection_id: str, camera_id: str, ts: str, label: str, confidence: float) -> str:
    return json.dumps(
        {"detection_id": detection_id, "camera_id": camera_id, "ts": ts, "label": label, "confidence": confidence}
    )


# ------------------------------------------------------------------------------------------------ help and usage
def test_help_lists_every_command(capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "--help")
    assert code == 0
    listed = out.split("{", 1)[1].split("}", 1)[0].split(",")  # argparse's "{ingest,batches,...}"
    assert sorted(listed) == sorted(COMMANDS)
    for command in COMMANDS:
        assert f"    {command}" in out, f"{command} has no help line"


def test_unknown_option_and_missing_command_exit_2(capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "batches", "--bogus")
    assert code == 2
    assert "unrecognized arguments: --bogus" in err
    code, out, err = run(capsys)
    assert code == 2
    assert "required: command" in err
    code, out, err = run(capsys, "ingest")
    assert code == 2
    assert "PATH" in err


# ------------------------------------------------------------------------------------------------ bad input
def test_batches_with_a_bad_as_of_exits_2_naming_the_option(capsys: pytest.CaptureFixture, isolated: Path) -> None:
    code, out, err = run(capsys, "batches", "--as-of", "yesterday")
    assert code == 2
    assert err.startswith("hsi batches: --as-of 'yesterday'")
    assert "RFC 3339" in err
    assert out == ""
    code, out, err = run(capsys, "batches", "--as-of", "2026-12-01T02:00:00")  # no offset
    assert code == 2
    assert "--as-of '2026-12-01T02:00:00'" in err and "offset" in err
    assert not isolated.exists()  # nothing was created for a bad argument


def test_batches_on_a_missing_database_exits_2_naming_the_path(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "none.duckdb"
    code, out, err = run(capsys, "batches", "--db", str(missing))
    assert code == 2
    assert f"hsi batches: no database at {missing}" in err
    assert "hsi ingest" in err  # says what to do
    assert not missing.exists() and not missing.parent.exists()


def test_ingest_of_a_missing_file_exits_2_naming_the_path(capsys: pytest.CaptureFixture, isolated: Path) -> None:
    code, out, err = run(capsys, "ingest", "/no/such/file")
    assert code == 2
    assert err.startswith("hsi ingest: ")
    assert "/no/such/file" in err
    assert "Traceback" not in err
    assert not isolated.exists()  # all paths are checked before anything is loaded


def test_ingest_of_a_directory_exits_2(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    code, out, err = run(capsys, "ingest", str(tmp_path))
    assert code == 2
    assert str(tmp_path) in err and "not a regular file" in err


@pytest.mark.parametrize(("variable", "value"), [("PARALLEL", "0"), ("ENRICHMENT_QUALITY_LEVEL", "best")])
def test_invalid_setting_in_the_environment_exits_2_naming_the_variable(
    capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    good = tmp_path / "good.jsonl"
    good.write_text(_record("d1", "cam", "2026-12-01T02:00:00Z", "car", 0.5) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "ingest", str(good))
    assert code == 2
    assert err.startswith("hsi ingest: invalid configuration: ")
    assert f"{variable}={value!r} is invalid: accepted values are" in err
    assert out == ""


def test_console_script_reports_errors_on_stderr(tmp_path: Path) -> None:
    """The installed `hsi` entry point (not just main()) exits 2 with one line on stderr and no traceback."""
    assert HSI_SCRIPT.is_file(), f"{HSI_SCRIPT} is not installed: pip install -e ."
    env = {k: v for k, v in os.environ.items() if k not in ("PARALLEL", "CTX_SIZE")}
    env.update({"HSI_ENV_FILE": os.devnull, "HSI_DUCKDB_PATH": str(tmp_path / "hsi.duckdb")})
    proc = subprocess.run(
        [str(HSI_SCRIPT), "ingest", "/no/such/file"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("hsi ingest: ") and "/no/such/file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ ingest and batches
def test_ingest_prints_loaded_and_quarantined_counts(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    source = tmp_path / "detections.jsonl"
    source.write_text(
        "\n".join(
            [
                _record("d1", "front_door", "2026-12-01T02:00:00Z", "car", 0.8),
                "{not json",
                _record("d2", "front_door", "2026-12-01T02:00:10.500+01:00", "dog", 0.6),
                _record("d3", "garage", "2026-12-01T02:00:20Z", "car", 1.5),  # confidence out of range
                _record("d4", "garage", "2026-12-01T02:00:30Z", "person", 0.95),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    db = tmp_path / "other.duckdb"
    code, out, err = run(capsys, "ingest", "--db", str(db), str(source))
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == f"{source}: 5 lines, 3 loaded, 0 duplicates skipped, 2 quarantined"
    assert lines[1].startswith("total: 3 loaded, 0 duplicates skipped, 2 quarantined in ")
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT detection_id FROM detections ORDER BY 1").fetchall() == [("d1",), ("d2",), ("d4",)]
        reasons = dict(conn.execute("SELECT line_no, reason FROM quarantine").fetchall())
    assert set(reasons) == {2, 4}
    assert "confidence" in reasons[4]
    # re-ingesting the same file loads nothing new
    code, out, err = run(capsys, "ingest", "--db", str(db), str(source))
    assert code == 0
    assert out.splitlines()[0] == f"{source}: 5 lines, 0 loaded, 3 duplicates skipped, 2 quarantined"


# Windows worked out by hand (window 90 s, idle 30 s, fast path = person >= 0.90), as of 02:01:50Z:
#   front_door  a1 00:00 car, a2 00:25 car, a3 00:40 person .95 (fast path), a4 00:50 dog, a5 01:15 car,
#               a6 01:35 car (95 s after a1 >= window: closes the first batch, opens the next)
#     -> [a1 a2 a4 a5] started 00:00, closes min(00:00+90, 01:15+30) = 01:30  window
#     -> [a3]          started 00:40, closes 00:40                           fast_path
#     -> [a6]          started 01:35, closes min(03:05, 02:05) = 02:05       open as of 01:50 (idle later)
#   garage      g1 00:10 person .50 (not confident: regular), g2 00:45 car (35 s idle gap >= 30: new batch)
#     -> [g1]          started 00:10, closes min(01:40, 00:40) = 00:40       idle
#     -> [g2]          started 00:45, closes min(02:15, 01:15) = 01:15       idle
#   driveway    h1 00:00, h2 00:25, h3 00:50, h4 01:00 (gaps < 30 s; the window and idle bounds tie at 01:30)
#     -> [h1 h2 h3 h4] started 00:00, closes min(00:00+90, 01:00+30) = 01:30 window (tie)
DETECTIONS = [
    ("a1", "front_door", "00:00", "car", 0.8),
    ("a2", "front_door", "00:25", "car", 0.6),
    ("a3", "front_door", "00:40", "person", 0.95),
    ("a4", "front_door", "00:50", "dog", 0.7),
    ("a5", "front_door", "01:15", "car", 0.9),
    ("a6", "front_door", "01:35", "car", 0.9),
    ("g1", "garage", "00:10", "person", 0.5),
    ("g2", "garage", "00:45", "car", 0.8),
    ("h4", "driveway", "01:00", "car", 0.7),
    ("h2", "driveway", "00:25", "car", 0.7),  # out of order on purpose
    ("h1", "driveway", "00:00", "car", 0.7),
    ("h3", "driveway", "00:50", "car", 0.7),
]


def _t(mm_ss: str) -> datetime:
    minutes, seconds = mm_ss.split(":")
    return datetime(2026, 12, 1, 2, int(minutes), int(seconds), tzinfo=UTC)


def _expected(as_of_open: bool) -> dict[str, dict]:
    """first detection id -> the listing fields of its batch."""
    rows = [
        ("a1", "front_door", "00:00", "01:30", "window", ["a1", "a2", "a4", "a5"]),
        ("a3", "front_door", "00:40", "00:40", "fast_path", ["a3"]),
        ("a6", "front_door", "01:35", "02:05", "open" if as_of_open else "idle", ["a6"]),
        ("g1", "garage", "00:10", "00:40", "idle", ["g1"]),
        ("g2", "garage", "00:45", "01:15", "idle", ["g2"]),
        ("h1", "driveway", "00:00", "01:30", "window", ["h1", "h2", "h3", "h4"]),
    ]
    return {
        first: {
            "camera_id": camera,
            "started_at": _t(start),
            "closes_at": _t(closes),
            "close_reason": reason,
            "detection_ids": ids,
        }
        for first, camera, start, closes, reason, ids in rows
    }


@pytest.fixture
def ingested(capsys: pytest.CaptureFixture, tmp_path: Path) -> Path:
    source = tmp_path / "windows.jsonl"
    source.write_text(
        "".join(
            _record(did, cam, f"2026-12-01T02:{mm_ss}Z", label, conf) + "\n"
            for did, cam, mm_ss, label, conf in DETECTIONS
        ),
        encoding="utf-8",
    )
    code, out, err = run(capsys, "ingest", str(source))
    assert code == 0, err
    assert out.splitlines()[0].endswith("12 lines, 12 loaded, 0 duplicates skipped, 0 quarantined")
    return source


def _listing(capsys: pytest.CaptureFixture, as_of: str, *extra: str) -> list[dict]:
    code, out, err = run(capsys, "batches", "--json", "--as-of", as_of, *extra)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]  # every line is one JSON object


@pytest.mark.parametrize(
    ("as_of", "open_"),
    [("2026-12-01T02:01:50Z", True), ("2026-12-01T03:01:50+01:00", True), ("2026-12-01T02:02:05Z", False)],
)
def test_batches_json_matches_the_windows_worked_out_by_hand(
    capsys: pytest.CaptureFixture, ingested: Path, as_of: str, open_: bool
) -> None:
    rows = _listing(capsys, as_of)
    expected = _expected(as_of_open=open_)
    assert len(rows) == len(expected)
    got = {}
    for row in rows:
        assert set(row) >= {"batch_id", "camera_id", "started_at", "closes_at", "close_reason", "detection_ids"}
        got[row["detection_ids"][0]] = {
            "camera_id": row["camera_id"],
            "started_at": datetime.fromisoformat(row["started_at"]),
            "closes_at": datetime.fromisoformat(row["closes_at"]),
            "close_reason": row["close_reason"],
            "detection_ids": row["detection_ids"],
        }
    assert got == expected
    # every detection is in exactly one batch
    ids = [d for row in rows for d in row["detection_ids"]]
    assert sorted(ids) == sorted(d[0] for d in DETECTIONS)
    # batch ids are distinct and carry the camera
    assert len({row["batch_id"] for row in rows}) == len(rows)
    for row in rows:
        assert row["batch_id"].startswith(row["camera_id"])


def test_batch_ids_are_the_same_when_the_input_is_replayed(
    capsys: pytest.CaptureFixture, ingested: Path, tmp_path: Path
) -> None:
    first = {row["detection_ids"][0]: row["batch_id"] for row in _listing(capsys, "2026-12-01T02:05:00Z")}
    replay_db = tmp_path / "replay.duckdb"
    code, out, err = run(capsys, "ingest", "--db", str(replay_db), str(ingested))
    assert code == 0, err
    again = {
        row["detection_ids"][0]: row["batch_id"]
        for row in _listing(capsys, "2026-12-01T02:05:00Z", "--db", str(replay_db))
    }
    assert again == first
    # an open batch keeps its id when it later closes
    before = {row["detection_ids"][0]: row["batch_id"] for row in _listing(capsys, "2026-12-01T02:01:50Z")}
    assert before == first


def test_batches_text_listing(capsys: pytest.CaptureFixture, ingested: Path) -> None:
    code, out, err = run(capsys, "batches", "--as-of", "2026-12-01T02:01:50Z")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-1] == "6 batches as of 2026-12-01T02:01:50+00:00"
    assert sum("  open " in line for line in lines) == 1
    assert sum("4 detections" in line for line in lines) == 2  # front_door's first batch and driveway's


def test_batches_as_of_an_earlier_time_ignores_later_detections(capsys: pytest.CaptureFixture, ingested: Path) -> None:
    """As of 02:01:20 a6 (01:35) has not happened: front_door's first batch is still open (closes 01:30), and so is
    driveway's; garage's second batch closed at 01:15."""
    rows = {
        row["detection_ids"][0]: (row["detection_ids"], row["close_reason"])
        for row in _listing(capsys, "2026-12-01T02:01:20Z")
    }
    assert rows == {
        "a1": (["a1", "a2", "a4", "a5"], "open"),
        "a3": (["a3"], "fast_path"),
        "g1": (["g1"], "idle"),
        "g2": (["g2"], "idle"),
        "h1": (["h1", "h2", "h3", "h4"], "open"),
    }
    # exactly at closes_at the batch is closed (T >= closes_at)
    rows = {row["detection_ids"][0]: row["close_reason"] for row in _listing(capsys, "2026-12-01T02:01:30Z")}
    assert rows["a1"] == "window" and rows["h1"] == "window"


def test_recorded_batches_are_listed_like_computed_ones(
    capsys: pytest.CaptureFixture, ingested: Path, isolated: Path
) -> None:
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.storage.batches import record_batch
    from hsi_dagster.storage.db import connect

    as_of = "2026-12-01T02:01:50Z"
    before = _listing(capsys, as_of)
    closed = [row["batch_id"] for row in before if row["close_reason"] != "open"]
    assert len(closed) == 5
    with connect(isolated) as conn:
        for batch_id in closed:
            record_batch(conn, batch_id, BatchRules(), datetime.fromisoformat(as_of.replace("Z", "+00:00")))
        assert conn.execute("SELECT count(*) FROM detection_batches").fetchone()[0] == 5
    contract = ("batch_id", "camera_id", "started_at", "closes_at", "close_reason", "detection_ids")

    def project(rows: list[dict]) -> list[dict]:
        return [{key: row[key] for key in contract} for row in rows]

    assert project(_listing(capsys, as_of)) == project(before)
