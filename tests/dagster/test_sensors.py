"""batch_window_sensor and inbox_sensor on real DuckDB files and a real (ephemeral) Dagster instance."""

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

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
