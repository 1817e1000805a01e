"""batch_window_sensor and inbox_sensor (loads files in the tick, then plans windows) on real DuckDB files and a real
(ephemeral) Dagster instance."""

import os
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.sensors import InboxCursor, batch_window_sensor, inbox_sensor, window_planning
from hsi_dagster.sensors import inbox as inbox_module
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import (
    closed_windows,
    detection,
    hours_ago,
    materialize_request,
    resources,
    sensor_tick,
)


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "hsi.duckdb")


def keys(result) -> list[str]:
    return [request.partition_key for request in result.run_requests]


def test_each_closed_window_requested_once_with_run_key_and_partition(instance, db):
    ingest_lines(db, closed_windows(["front_door", "garage"], 3, start=hours_ago(2)))
    res = resources(db)
    first = sensor_tick(batch_window_sensor, instance, res, None)
    assert len(first.run_requests) == 6
    assert [r.run_key for r in first.run_requests] == keys(first)  # run_key = batch_id
    assert set(keys(first)) == set(instance.get_dynamic_partitions("batches"))
    assert {r.tags["hsi/camera"] for r in first.run_requests} == {"front_door", "garage"}
    again = sensor_tick(batch_window_sensor, instance, res, first.cursor)
    assert again.run_requests == []


def test_restart_with_stored_cursor_neither_skips_nor_repeats(instance, db):
    ingest_lines(db, closed_windows(["cam1"], 2, start=hours_ago(3)))
    res = resources(db)
    first = sensor_tick(batch_window_sensor, instance, res, None)
    ingest_lines(db, closed_windows(["cam2"], 2, start=hours_ago(2)), source="second")
    stored = first.cursor  # the daemon restarts: a fresh context with the stored cursor
    after = sensor_tick(batch_window_sensor, instance, res, stored)
    assert set(keys(after)).isdisjoint(keys(first))
    assert sorted(r.tags["hsi/camera"] for r in after.run_requests) == ["cam2", "cam2"]


def test_open_window_is_not_requested_until_it_closes(instance, db):
    now = datetime.now(UTC)
    ingest_lines(
        db,
        [
            detection("open-1", "porch", now - timedelta(seconds=4)),
            detection("old-1", "porch", now - timedelta(hours=1)),
        ],
    )
    result = sensor_tick(batch_window_sensor, instance, resources(db), None)
    assert len(result.run_requests) == 1
    assert result.run_requests[0].partition_key.startswith("porch")
    # the open window (4 s old, idle timeout 30 s) is left for a later tick
    batch_id = result.run_requests[0].partition_key
    assert "open-1" not in batch_id


def test_per_tick_cap_holds_and_the_rest_come_next_tick(instance, db):
    ingest_lines(db, closed_windows(["c1", "c2"], 5, start=hours_ago(4)))
    res = resources(db, SENSOR_MAX_BATCHES_PER_TICK="4")
    seen: list[str] = []
    cursor = None
    for _ in range(3):
        result = sensor_tick(batch_window_sensor, instance, res, cursor)
        assert len(result.run_requests) <= 4
        seen += keys(result)
        cursor = result.cursor
    assert len(seen) == 10 and len(set(seen)) == 10


def test_closed_window_whose_run_failed_before_recording_is_requested_again_after_grace(
    instance, db, tmp_path, monkeypatch
):
    """A real run of the requested window fails in its first step, before `detection_batches` records the batch:
    the window stays closed and unrecorded. Within the grace it is left alone; after it, it is requested again."""
    ingest_lines(db, closed_windows(["porch"], 1, start=hours_ago(1)))
    res = resources(db)
    first = sensor_tick(batch_window_sensor, instance, res, None)
    [request] = first.run_requests
    broken = {**res, "duckdb": HsiDuckDBResource(database=str(tmp_path))}  # a folder, not a DuckDB file
    failed = materialize_request([detection_batches], request, instance, broken, raise_on_error=False)
    assert not failed.success
    assert sensor_tick(batch_window_sensor, instance, res, first.cursor).run_requests == []
    later = time.time() + 601  # past the 600 s grace
    monkeypatch.setattr(window_planning, "time", SimpleNamespace(time=lambda: later))
    again = sensor_tick(batch_window_sensor, instance, res, first.cursor)
    assert [(r.partition_key, r.run_key, r.tags["hsi/attempt"]) for r in again.run_requests] == [
        (request.partition_key, f"{request.partition_key}#retry1", "2")
    ]


def test_runs_launched_elsewhere_count_as_attempts(instance, db, tmp_path, monkeypatch):
    """A run of the window launched without this sensor (`hsi process`, the UI) failed just now: the sensor, with no
    cursor, sees it in the instance and waits out the back-off before asking for attempt 2."""
    ingest_lines(db, closed_windows(["shed"], 1, start=hours_ago(1)))
    res = resources(db)
    batch_id = sensor_tick(batch_window_sensor, instance, res, None).run_requests[0].partition_key
    broken = {**res, "duckdb": HsiDuckDBResource(database=str(tmp_path))}
    assert not dg.materialize(
        [detection_batches], partition_key=batch_id, instance=instance, resources=broken, raise_on_error=False
    ).success
    assert sensor_tick(batch_window_sensor, instance, res, None).run_requests == []
    later = time.time() + 601
    monkeypatch.setattr(window_planning, "time", SimpleNamespace(time=lambda: later))
    again = sensor_tick(batch_window_sensor, instance, res, None)
    assert [r.run_key for r in again.run_requests] == [f"{batch_id}#retry1"]


def test_no_database_yet_is_a_skip_not_an_error(instance, tmp_path):
    result = sensor_tick(batch_window_sensor, instance, resources(str(tmp_path / "none.duckdb")), None)
    assert result.run_requests == [] and "no database" in (result.skip_message or "")


def loaded_ids(db: str) -> list[str]:
    with HsiDuckDBResource(database=db).get_connection(read_only=True) as conn:
        return sorted(row[0] for row in conn.execute("SELECT detection_id FROM detections").fetchall())


def materialized_files(result) -> list[str]:
    return [Path(p).name for event in result.asset_events for p in event.metadata["files"].value]


def test_inbox_sensor_loads_each_file_once_in_the_tick_also_after_restart(instance, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "db.duckdb")
    (inbox / "a.jsonl").write_text(detection("x1", "cam", hours_ago(1)) + "\n" + '{"camera_id": "cam"}\n')
    (inbox / ".b.jsonl.part").write_text("partial")  # still being written: ignored
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert first.run_requests == [] or all(r.job_name == "batch_pipeline" for r in first.run_requests)
    [event] = first.asset_events
    assert event.asset_key == dg.AssetKey("detections")
    assert materialized_files(first) == ["a.jsonl"]
    assert event.metadata["loaded"].value == 1 and event.metadata["quarantined"].value == 1
    assert loaded_ids(db) == ["x1"]
    again = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert again.asset_events == []
    (inbox / "c.jsonl").write_text(detection("x2", "cam", hours_ago(1)) + "\n")
    restarted = sensor_tick(inbox_sensor, instance, res, first.cursor)  # the daemon restarts with the stored cursor
    assert materialized_files(restarted) == ["c.jsonl"]
    assert loaded_ids(db) == ["x1", "x2"]


def test_inbox_tick_that_died_midway_loses_and_repeats_nothing(instance, tmp_path):
    """The tick loaded the files but died before its cursor was stored and before it took the files out of the
    inbox: the next tick, from the old cursor, reads them again and loads nothing twice (`ingested_files`); a file
    that changed is loaded again."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "db.duckdb")
    (inbox / "a.jsonl").write_text(detection("x1", "cam", hours_ago(1)) + "\n")
    (inbox / "b.jsonl").write_text(detection("x2", "cam", hours_ago(1)) + "\n")
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    sensor_tick(inbox_sensor, instance, res, None)  # its cursor is lost
    for name in ("a.jsonl", "b.jsonl"):  # as they were before it archived them (inbox_archive.py)
        shutil.copy2(inbox / ".processed" / name, inbox / name)
    redo = sensor_tick(inbox_sensor, instance, res, None)
    [event] = redo.asset_events
    assert event.metadata["loaded"].value == 0 and event.metadata["already_ingested"].value == 2
    assert loaded_ids(db) == ["x1", "x2"]
    (inbox / "b.jsonl").write_text(  # written again, longer: a new version of the file
        detection("x2", "cam", hours_ago(1)) + "\n" + detection("x3", "cam", hours_ago(1)) + "\n"
    )
    grown = sensor_tick(inbox_sensor, instance, res, redo.cursor)
    assert materialized_files(grown) == ["b.jsonl"] and grown.asset_events[0].metadata["loaded"].value == 1
    assert loaded_ids(db) == ["x1", "x2", "x3"]


def test_inbox_file_over_the_tick_bound_goes_to_an_ingest_run(instance, tmp_path, monkeypatch):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    big = inbox / "bulk.jsonl"
    big.write_text("\n".join(detection(f"b{n}", "cam", hours_ago(1)) for n in range(50)) + "\n")
    monkeypatch.setattr(inbox_module, "INBOX_MAX_BYTES_PER_TICK", big.stat().st_size - 1)
    res = resources(str(tmp_path / "db.duckdb"), HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    [request] = first.run_requests
    assert request.job_name == "ingest_detections"
    assert request.run_config["ops"]["detections"]["config"]["paths"] == [str(big.resolve())]
    assert first.asset_events == []
    assert sensor_tick(inbox_sensor, instance, res, first.cursor).run_requests == []


def test_inbox_sensor_plans_windows_only_up_to_the_oldest_file_not_yet_loaded(instance, tmp_path, monkeypatch):
    """One file per tick (bound): a closed window whose later detection waits in the second file is not decided
    in the first tick (it would be split), but in the tick that loads that file, with its partition added."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "db.duckdb")
    start = datetime.now(UTC) - timedelta(seconds=120)
    first_file, second_file = inbox / "1.jsonl", inbox / "2.jsonl"
    first_file.write_text(detection("w-a", "porch", start) + "\n")
    second_file.write_text(detection("w-b", "porch", start + timedelta(seconds=20)) + "\n")
    written = start.timestamp() + 21  # the second file was written right after its detection
    os.utime(first_file, (start.timestamp() + 1, start.timestamp() + 1))
    os.utime(second_file, (written, written))
    monkeypatch.setattr(inbox_module, "INBOX_MAX_FILES_PER_TICK", 1)
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert materialized_files(first) == ["1.jsonl"]
    assert first.run_requests == []  # w-a alone looks closed (idle 30 s) but 2.jsonl is older than its close
    second = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert materialized_files(second) == ["2.jsonl"]
    [request] = second.run_requests
    assert request.job_name == "batch_pipeline" and request.run_key == request.partition_key
    assert instance.get_dynamic_partitions("batches") == [request.partition_key]
    with HsiDuckDBResource(database=db).get_connection(read_only=True) as conn:
        [batch] = pending_closed_batches(
            conn, BatchRules.from_settings(res["pipeline_settings"].get()), datetime.now(UTC)
        )
    assert batch.batch_id == request.partition_key and set(batch.detection_ids) == {"w-a", "w-b"}
    assert sensor_tick(inbox_sensor, instance, res, second.cursor).run_requests == []


def test_batch_window_sensor_leaves_windows_to_the_inbox_sensor_when_the_inbox_exists(instance, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "db.duckdb")
    ingest_lines(db, closed_windows(["cam1"], 1, start=hours_ago(1)))
    res = resources(db, HSI_INBOX_DIR=str(inbox))
    skipped = sensor_tick(batch_window_sensor, instance, res, None)
    assert skipped.run_requests == [] and "inbox_sensor" in (skipped.skip_message or "")
    planned = sensor_tick(inbox_sensor, instance, res, None)
    assert [r.tags["hsi/camera"] for r in planned.run_requests] == ["cam1"]


def _drop(inbox, name: str, *lines: str) -> None:
    """As a writer does: a `.`-prefixed file renamed when complete."""
    part = inbox / f".{name}.part"
    part.write_text("".join(line + "\n" for line in lines))
    part.rename(inbox / name)


def test_inbox_tick_holds_on_for_a_window_about_to_close_and_requests_it_in_the_same_tick(instance, tmp_path):
    """The daemon ticks every 5 s: a window closing 1.5 s after a tick started is requested by that tick, once its
    close and the write delay have passed, and never before; with SENSOR_HOLD_SECONDS=0 it waits for a later tick."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    closes_at = time.time() + 1.5  # idle timeout 30 s after the only detection
    _drop(inbox, "a.jsonl", detection("h-1", "porch", datetime.fromtimestamp(closes_at - 30, UTC)))
    db = str(tmp_path / "db.duckdb")
    quick = sensor_tick(inbox_sensor, instance, resources(db, HSI_INBOX_DIR=str(inbox), SENSOR_HOLD_SECONDS="0"), None)
    assert materialized_files(quick) == ["a.jsonl"] and quick.run_requests == []
    assert time.time() < closes_at  # it did not wait
    res = resources(db, HSI_INBOX_DIR=str(inbox), SENSOR_HOLD_SECONDS="3.5")
    held = sensor_tick(inbox_sensor, instance, res, quick.cursor)
    [request] = held.run_requests
    assert request.tags["hsi/camera"] == "porch" and held.asset_events == []
    assert time.time() >= closes_at + res["pipeline_settings"].get().INBOX_WRITE_DELAY_SECONDS
    assert sensor_tick(inbox_sensor, instance, res, held.cursor).run_requests == []


def test_inbox_hold_loads_files_as_they_arrive_extending_open_windows_and_closing_fast_path_ones(instance, tmp_path):
    """While the tick holds on, a file that arrives is loaded in the same tick: its detection extends the porch
    window (not requested: it would be split), and its confident person (fast path) is requested at once."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    first_close = time.time() + 1.5
    _drop(inbox, "1.jsonl", detection("p-1", "porch", datetime.fromtimestamp(first_close - 30, UTC)))

    def later_file() -> None:
        time.sleep(0.6)
        now = datetime.now(UTC)
        _drop(inbox, "2.jsonl", detection("p-2", "porch", now), detection("d-1", "door", now, "person", 0.95))

    writer = threading.Thread(target=later_file)
    writer.start()
    res = resources(str(tmp_path / "db.duckdb"), HSI_INBOX_DIR=str(inbox), SENSOR_HOLD_SECONDS="3.5")
    try:
        held = sensor_tick(inbox_sensor, instance, res, None)
    finally:
        writer.join()
    assert materialized_files(held) == ["1.jsonl", "2.jsonl"]
    [request] = held.run_requests
    assert request.tags["hsi/camera"] == "door"
    assert time.time() < first_close + 30  # the extended porch window is still open: not requested


def test_inbox_tick_holds_on_before_the_database_exists(instance, tmp_path):
    """A fresh install: no database, empty inbox. The first file, written during the tick, is loaded by it and its
    confident person requested by it (not left to a tick up to 5 s later)."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    writer = threading.Timer(
        0.5, lambda: _drop(inbox, "1.jsonl", detection("f-1", "gate", datetime.now(UTC), "person", 0.95))
    )
    res = resources(str(tmp_path / "db.duckdb"), HSI_INBOX_DIR=str(inbox), SENSOR_HOLD_SECONDS="3.5")
    writer.start()
    try:
        result = sensor_tick(inbox_sensor, instance, res, None)
    finally:
        writer.join()
    assert materialized_files(result) == ["1.jsonl"]
    assert [r.tags["hsi/camera"] for r in result.run_requests] == ["gate"]


def test_batch_window_sensor_holds_on_for_a_window_about_to_close(instance, db):
    closes_at = time.time() + 1.0
    ingest_lines(db, [detection("b-1", "yard", datetime.fromtimestamp(closes_at - 30, UTC))])
    result = sensor_tick(batch_window_sensor, instance, resources(db, SENSOR_HOLD_SECONDS="3"), None)
    [request] = result.run_requests
    assert request.tags["hsi/camera"] == "yard" and time.time() >= closes_at


def _tick_while_a_person_is_ingested(sensor, instance, res, cursor, db: str):
    """One tick of `sensor` while `hsi ingest` (another process, here a thread) loads a confident person at the gate
    0.5 s into it; the tick's result and how long it took."""

    def ingest_later() -> None:
        time.sleep(0.5)
        ingest_lines(db, [detection("p-1", "gate", datetime.now(UTC), "person", 0.95)], source="later")

    writer = threading.Thread(target=ingest_later)
    started = time.time()
    writer.start()
    try:
        return sensor_tick(sensor, instance, res, cursor), time.time() - started
    finally:
        writer.join()


def test_a_holding_tick_sees_detections_loaded_meanwhile_and_ends_when_it_has_runs(instance, tmp_path):
    """No window open when the tick starts: it watches anyway. `hsi ingest` (another process, here a thread)
    loads a confident person 0.5 s later; the tick plans again after that database write and requests it."""
    db = str(tmp_path / "db.duckdb")
    ingest_lines(db, [detection("old", "yard", hours_ago(2))])
    res = resources(db, SENSOR_HOLD_SECONDS="3")
    first = sensor_tick(batch_window_sensor, instance, res, None)  # the old window: requested at once
    assert len(first.run_requests) == 1

    second, took = _tick_while_a_person_is_ingested(batch_window_sensor, instance, res, first.cursor, db)
    [request] = second.run_requests
    assert request.tags["hsi/camera"] == "gate"
    assert took < 3  # ended with its run, before the hold's end
    idle = time.time()
    assert sensor_tick(batch_window_sensor, instance, res, second.cursor).run_requests == []
    assert time.time() - idle >= 3  # nothing to request: it watched for the whole hold


def test_an_inbox_tick_also_sees_detections_written_to_the_database_by_other_paths(instance, tmp_path):
    """With an inbox folder, inbox_sensor plans every window, also those of detections loaded by `hsi ingest` or
    Frigate (another process, here a thread): the holding tick plans again after their database write and requests
    a confident person in the same tick, not at a tick up to 5 s later."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    db = str(tmp_path / "db.duckdb")
    ingest_lines(db, [detection("old", "yard", hours_ago(2))])
    res = resources(db, HSI_INBOX_DIR=str(inbox), SENSOR_HOLD_SECONDS="3", INBOX_WRITE_DELAY_SECONDS="0.2")
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert [r.tags["hsi/camera"] for r in first.run_requests] == ["yard"]

    second, took = _tick_while_a_person_is_ingested(inbox_sensor, instance, res, first.cursor, db)
    assert [r.tags["hsi/camera"] for r in second.run_requests] == ["gate"]
    assert took < 3  # requested by this tick, before its hold ended


def test_inbox_cursor_of_the_run_per_file_sensor_is_read():
    old = dg.serialize_value({"/in/a.jsonl": "10:5"})
    assert InboxCursor.from_json(old).files == {"/in/a.jsonl": "10:5"}
