"""report_rows: the given batches with their batch and assessment rows, unrecorded ones kept (with None fields)."""

from datetime import UTC, datetime
from pathlib import Path

from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import save_assessment
from hsi_dagster.storage.reports import ReportRow, report_rows

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def test_rows_by_camera_with_unrecorded_batches_last(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    with connect(db) as conn:
        for batch_id, camera in (("b2", "porch"), ("b1", "garage")):
            conn.execute(
                "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
                " detection_count, detection_ids, recorded_at) VALUES (?, ?, ?, ?, ?, 'idle', 2, ['a', 'b'], ?)",
                [batch_id, camera, T0, T0, T0, T0],
            )
        save_assessment(
            conn,
            {"batch_id": "b1", "camera_id": "garage", "status": "ok", "risk_score": 70, "risk_level": "high"},
        )
    with connect(db, read_only=True) as conn:
        assert report_rows(conn, []) == []
        rows = report_rows(conn, ["ghost", "b2", "b1"])
    assert [(r.batch_id, r.camera_id, r.status, r.risk_level) for r in rows] == [
        ("b1", "garage", "ok", "high"),
        ("b2", "porch", None, None),
        ("ghost", None, None, None),
    ]
    assert rows[2] == ReportRow("ghost", *([None] * 12))
