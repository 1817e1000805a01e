"""batch_window_sensor and inbox_sensor on real DuckDB files and a real (ephemeral) Dagster instance."""

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import dagster as dg
import pytest

from hsi_dagster import sensors
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.sensors import batch_window_sensor, inbox_sensor
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import closed_windows, detection, hours_ago, resources, sensor_tick


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
    failed = dg.materialize(
        [detection_batches],
        partition_key=request.partition_key,
        instance=instance,
        resources=broken,
        tags=request.tags,
        raise_on_error=False,
    )
    assert not failed.success
    assert sensor_tick(batch_window_sensor, instance, res, first.cursor).run_requests == []
    later = time.time() + 601  # past the 600 s grace
    monkeypatch.setattr(sensors, "time", SimpleNamespace(time=lambda: later))
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
    monkeypatch.setattr(sensors, "time", SimpleNamespace(time=lambda: later))
    again = sensor_tick(batch_window_sensor, instance, res, None)
    assert [r.run_key for r in again.run_requests] == [f"{batch_id}#retry1"]


def test_no_database_yet_is_a_skip_not_an_error(instance, tmp_path):
    result = sensor_tick(batch_window_sensor, instance, resources(str(tmp_path / "none.duckdb")), None)
    assert result.run_requests == [] and "no database" in (result.skip_message or "")


def test_inbox_sensor_requests_each_file_once_also_after_restart(instance, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.jsonl").write_text(detection("x1", "cam", hours_ago(1)) + "\n")
    (inbox / ".b.jsonl.part").write_text("partial")  # still being written: ignored
    res = resources(str(tmp_path / "db.duckdb"), HSI_INBOX_DIR=str(inbox))
    first = sensor_tick(inbox_sensor, instance, res, None)
    assert len(first.run_requests) == 1
    config = first.run_requests[0].run_config
    assert config["ops"]["detections"]["config"]["paths"] == [str((inbox / "a.jsonl").resolve())]
    assert sensor_tick(inbox_sensor, instance, res, first.cursor).run_requests == []
    (inbox / "c.jsonl").write_text(detection("x2", "cam", hours_ago(1)) + "\n")
    restarted = sensor_tick(inbox_sensor, instance, res, first.cursor)
    assert [r.run_key.split(":")[0] for r in restarted.run_requests] == ["c.jsonl"]
