"""The rows of the risk timeline: every recorded batch that started in a time range, with its verdict if any."""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from hsi_dagster.core.outbound.timeline import RiskPoint

UNASSESSED = "unassessed"  # recorded, but no assessment row (the LLM was unreachable, or it has not run yet)


def risk_points_between(conn: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> list[RiskPoint]:
    """Batches with `start <= started_at < end`, in time order; a batch without an assessment is `unassessed`."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    rows = conn.execute(
        "SELECT b.batch_id, b.camera_id, b.started_at, coalesce(r.status, ?), r.risk_score, r.risk_level, r.summary"
        " FROM detection_batches b LEFT JOIN risk_assessments r ON r.batch_id = b.batch_id"
        " WHERE b.started_at >= ? AND b.started_at < ? ORDER BY b.started_at, b.batch_id",
        [UNASSESSED, start, end],
    ).fetchall()
    return [
        RiskPoint(
            batch_id=batch_id,
            camera_id=camera_id,
            started_at=started_at.astimezone(UTC),
            status=status,
            # A score counts only with status ok: a failed row's score (if any) is no verdict.
            risk_score=int(score) if score is not None and status == "ok" else None,
            risk_level=level if status == "ok" else None,
            summary=summary,
        )
        for batch_id, camera_id, started_at, status, score, level, summary in rows
    ]
