"""Verdicts to write back to Frigate events, and what happened (table `frigate_writebacks`, migration 8).

A batch came from Frigate when its detections have `frigate:` detection ids (core/frigate: `frigate:<id>:...`);
their `track_id` is Frigate's event id. One row per batch: `done`, `failed: <why>` (a 4xx, never retried), or
`retry` with the attempts so far (no answer, a 5xx); a row that is not final is tried again at the next tick.
"""

from __future__ import annotations

from datetime import datetime

import duckdb

from hsi_dagster.core.outbound.frigate_writeback import MAX_ATTEMPTS, RETRY, WritebackTarget
from hsi_dagster.core.verdict.final import VERDICT_STATUSES
from hsi_dagster.storage.mqtt_outbox import publisher_since

WRITEBACK = "frigate_writeback"


def writeback_since(conn: duckdb.DuckDBPyConnection, now: datetime) -> datetime:
    """From when verdicts are written back (the first tick: the hour before it)."""
    return publisher_since(conn, now, name=WRITEBACK)


def pending_writebacks(conn: duckdb.DuckDBPyConnection, since: datetime, limit: int) -> list[WritebackTarget]:
    """Verdicts (core/verdict/final.py VERDICT_STATUSES: `ok`, `floor_only`) since `since` of batches with Frigate
    detections, not written back yet (or to retry); without a summary (floor_only), the floor's reasons."""
    rows = conn.execute(
        """SELECT r.batch_id, r.camera_id, r.risk_level, r.risk_score,
                  coalesce(nullif(r.summary, ''), array_to_string(CAST(r.floor_reasons AS VARCHAR[]), '; ')),
                  coalesce(w.attempts, 0)
           FROM risk_assessments r LEFT JOIN frigate_writebacks w USING (batch_id)
           WHERE list_contains($statuses, r.status) AND r.risk_level IS NOT NULL AND r.assessed_at >= $since
             AND (w.batch_id IS NULL OR (w.status = $retry AND w.attempts < $max_attempts))
             AND EXISTS (SELECT 1 FROM detections d WHERE d.batch_id = r.batch_id AND d.detection_id LIKE 'frigate:%'
                         AND d.ts >= $since - INTERVAL 1 DAY)
           ORDER BY r.assessed_at, r.batch_id
           LIMIT $limit""",
        {
            "since": since,
            "retry": RETRY,
            "max_attempts": MAX_ATTEMPTS,
            "limit": limit,
            "statuses": list(VERDICT_STATUSES),
        },
    ).fetchall()
    if not rows:
        return []
    events = dict(
        conn.execute(
            """SELECT batch_id, list(DISTINCT track_id ORDER BY track_id) FROM detections
               WHERE list_contains($batches, batch_id) AND detection_id LIKE 'frigate:%' AND track_id IS NOT NULL
               GROUP BY batch_id""",
            {"batches": [row[0] for row in rows]},
        ).fetchall()
    )
    return [
        WritebackTarget(batch, camera, level, score, summary, tuple(events[batch]), attempts)
        for batch, camera, level, score, summary, attempts in rows
        if events.get(batch)
    ]


def record_writeback(
    conn: duckdb.DuckDBPyConnection, target: WritebackTarget, status: str, error: str | None, now: datetime
) -> None:
    conn.execute(
        """INSERT INTO frigate_writebacks (batch_id, event_ids, status, attempts, last_error, updated_at)
           VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (batch_id) DO UPDATE SET event_ids = excluded.event_ids, status = excluded.status,
               attempts = excluded.attempts, last_error = excluded.last_error, updated_at = excluded.updated_at""",
        [target.batch_id, list(target.event_ids), status, target.attempts + 1, error, now],
    )


def writeback_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Batches per write-back status (`failed: ...` counted as failed)."""
    rows = conn.execute(
        "SELECT split_part(status, ':', 1), count(*) FROM frigate_writebacks GROUP BY 1 ORDER BY 1"
    ).fetchall()
    return {status: count for status, count in rows}
