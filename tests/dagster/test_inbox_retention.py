"""What inbox_sensor does with a file once it is loaded (hsi_dagster/sensors/inbox_archive.py): archived in
`<inbox>/.processed/` and out of the cursor, deleted there after INBOX_RETENTION_HOURS (0 = at once); never before
`ingested_files` records it loaded to its end; a file that failed stays; a new version under the same name is loaded.
Real DuckDB files, a real (ephemeral) Dagster instance, real folders."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.sensors import inbox as inbox_module
from hsi_dagster.sensors import inbox_sensor
from hsi_dagster.sensors.inbox_archive import PROCESSED_DIR, where_now
from hsi_dagster.storage.ingest import ingest_files
from tests.support.pipeline_helpers import detection, hours_ago, resources, sensor_tick


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    folder = tmp_path / "inbox"
    folder.mkdir()
    return folder


def drop(inbox: Path, name: str, *ids: str) -> Path:
    path = inbox / name
    path.write_text("".join(detection(i, "cam", hours_ago(1)) + "\n" for i in ids))
    return path


def loaded_ids(db: str) -> list[str]:
    with HsiDuckDBResource(database=db).get_connection(read_only=True) as conn:
        return sorted(row[0] for row in conn.execute("SELECT detection_id FROM detections").fetchall())


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def cursor_files(result) -> dict[str, str]:
    return json.loads(result.cursor)["files"]


def test_loaded_files_leave_the_inbox_and_the_cursor_and_are_kept_for_the_retention(instance, inbox, tmp_path):
    db = str(tmp_path / "db.duckdb")
    drop(inbox, "a.jsonl", "x1")
    drop(inbox, "b.jsonl", "x2", "x3")
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert loaded_ids(db) == ["x1", "x2", "x3"]
    assert names(inbox) == [] and names(inbox / PROCESSED_DIR) == ["a.jsonl", "b.jsonl"]
    assert cursor_files(first) == {}  # the cursor holds what is in the inbox, not every file ever seen
    assert first.asset_events[0].metadata["retired_from_inbox"].value == 2
    assert where_now(inbox / "a.jsonl") == inbox / PROCESSED_DIR / "a.jsonl"
    again = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert again.asset_events == [] and loaded_ids(db) == ["x1", "x2", "x3"]


def test_retention_zero_deletes_a_file_once_it_is_loaded(instance, inbox, tmp_path):
    db = str(tmp_path / "db.duckdb")
    drop(inbox, "a.jsonl", "x1")
    first = sensor_tick(
        inbox_sensor, instance, resources(db, HSI_INBOX_DIR=str(inbox), INBOX_RETENTION_HOURS="0"), None
    )
    assert loaded_ids(db) == ["x1"]
    assert names(inbox) == [] and not (inbox / PROCESSED_DIR).exists()
    assert cursor_files(first) == {}


def test_archived_files_are_deleted_after_the_retention(instance, inbox, tmp_path, monkeypatch):
    """INBOX_RETENTION_HOURS of about 1 s: a file archived by one tick is deleted by a tick 2 s later, one archived
    by that later tick is kept."""
    monkeypatch.setattr(inbox_module, "INBOX_PRUNE_EVERY_SECONDS", 0.0)
    db = str(tmp_path / "db.duckdb")
    res = resources(db, HSI_INBOX_DIR=str(inbox), INBOX_RETENTION_HOURS=str(1 / 3600))
    drop(inbox, "old.jsonl", "x1")
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert names(inbox / PROCESSED_DIR) == ["old.jsonl"]
    time.sleep(2.0)
    drop(inbox, "new.jsonl", "x2")
    second = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert names(inbox / PROCESSED_DIR) == ["new.jsonl"]
    assert json.loads(second.cursor)["pruned_at"] > json.loads(first.cursor)["pruned_at"]
    assert loaded_ids(db) == ["x1", "x2"]  # deleting the file never touches what was loaded from it


def test_a_file_that_failed_to_load_stays_in_the_inbox(instance, inbox, tmp_path):
    """A .jsonl.gz corrupt after its first lines: the lines before are kept, but the file is not recorded as loaded
    to its end, so it stays (named in the log) and in the cursor, while a good file beside it leaves."""
    db = str(tmp_path / "db.duckdb")
    good = gzip.compress((detection("x1", "cam", hours_ago(1)) + "\n").encode())
    (inbox / "bad.jsonl.gz").write_bytes(good[: len(good) // 2])
    drop(inbox, "ok.jsonl", "x2")
    first = sensor_tick(inbox_sensor, instance, resources(db, HSI_INBOX_DIR=str(inbox)), None)
    assert "bad.jsonl.gz" in json.dumps(first.asset_events[0].metadata["failed"].value)
    assert names(inbox) == ["bad.jsonl.gz"] and names(inbox / PROCESSED_DIR) == ["ok.jsonl"]
    assert list(cursor_files(first)) == [str(inbox / "bad.jsonl.gz")]


def test_a_file_reappearing_under_the_same_name_with_new_content_is_loaded(instance, inbox, tmp_path):
    db = str(tmp_path / "db.duckdb")
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    drop(inbox, "cam.jsonl", "x1")
    first = sensor_tick(inbox_sensor, instance, res, None)
    drop(inbox, "cam.jsonl", "x2", "x3")  # a writer that reuses its file name
    second = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert [Path(p).name for p in second.asset_events[0].metadata["files"].value] == ["cam.jsonl"]
    assert loaded_ids(db) == ["x1", "x2", "x3"]
    assert names(inbox) == [] and names(inbox / PROCESSED_DIR) == ["cam.jsonl"]
    assert (inbox / PROCESSED_DIR / "cam.jsonl").read_text().count("\n") == 2  # the newer one is kept


def test_a_file_handed_to_an_ingest_run_leaves_only_once_the_run_recorded_it(instance, inbox, tmp_path, monkeypatch):
    db = str(tmp_path / "db.duckdb")
    big = drop(inbox, "bulk.jsonl", *(f"b{n}" for n in range(20)))
    monkeypatch.setattr(inbox_module, "INBOX_MAX_BYTES_PER_TICK", big.stat().st_size - 1)
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    [request] = first.run_requests
    assert names(inbox) == ["bulk.jsonl"]  # not loaded yet: it stays
    waiting = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert names(inbox) == ["bulk.jsonl"] and json.loads(waiting.cursor)["handed_on"]
    ingest_files(db, request.run_config["ops"]["detections"]["config"]["paths"])  # what the ingest run does
    done = sensor_tick(inbox_sensor, instance, res, waiting.cursor)
    assert names(inbox) == [] and names(inbox / PROCESSED_DIR) == ["bulk.jsonl"]
    assert cursor_files(done) == {} and json.loads(done.cursor)["handed_on"] == {}
    assert len(loaded_ids(db)) == 20
