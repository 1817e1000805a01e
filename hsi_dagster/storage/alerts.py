"""The `alerts` table and the rows alerts are decided from (decisions in `core.verdict.alerts`, posting in
`resources.alerts`). One row per alert_id: a sensor re-evaluating a tick never alerts twice."""

from __future__ import annotations

from datetime import datetime

import duckdb

from hsi_dagster.core.outbound.mqtt_messages import reasons_from
from hsi_dagster.core.verdict.alerts import (
    PROMPT_TOO_LARGE,
    Alert,
    VisitRef,
    fast_path_unassessed_alert,
    prompt_too_large_alert,
    risk_alert,
)
from hsi_dagster.storage.evidence_alerts import alerts_for_batch
from hsi_dagster.storage.visits import evidence_alerts_of_visit


def risk_alert_for(conn: duckdb.DuckDBPyConnection, batch_id: str) -> Alert | None:
    """The alert the batch's verdict calls for, if any: a valid assessment (`ok`), or the evidence floor's verdict
    when the model gave no usable output (`floor_only`, core/verdict/final.py). Nothing when an evidence-only alert
    already said this level or above for the batch's detections or its visit (one alert per level)."""
    row = conn.execute(
        "SELECT r.camera_id, r.risk_level, r.risk_score, r.summary, v.visit_id, v.cameras, v.risk_level, v.reasons"
        " FROM risk_assessments r LEFT JOIN visit_batches vb ON vb.batch_id = r.batch_id"
        " LEFT JOIN visits v ON v.visit_id = vb.visit_id"
        " WHERE r.batch_id = ? AND r.status IN ('ok', 'floor_only')",
        [batch_id],
    ).fetchone()
    if row is None:
        return None
    camera_id, level, score, summary, visit_id, cameras, visit_level, reasons = row
    visit = None if visit_id is None else VisitRef(visit_id, tuple(cameras), visit_level, reasons_from(reasons))
    alerted = [("evidence:" + alert["alert_key"], alert["risk_level"]) for alert in alerts_for_batch(conn, batch_id)]
    if visit_id is not None:
        alerted += evidence_alerts_of_visit(conn, visit_id)
    return risk_alert(batch_id, camera_id, level, score, summary, visit=visit, alerted=alerted)


def unassessed_fast_path_alert(conn: duckdb.DuckDBPyConnection, batch_id: str) -> Alert | None:
    """The alert for a fast-path batch that has no valid assessment, if the batch is one; for any batch whose prompt
    could not fit its slot even at its floor (status prompt_too_large), the alert saying so."""
    too_large = conn.execute(
        "SELECT b.camera_id, b.labels, r.error FROM detection_batches b JOIN risk_assessments r USING (batch_id)"
        " WHERE b.batch_id = ? AND r.status = ?",
        [batch_id, PROMPT_TOO_LARGE],
    ).fetchone()
    if too_large is not None:
        return prompt_too_large_alert(batch_id, too_large[0], too_large[1] or [], too_large[2])
    row = conn.execute(
        "SELECT b.camera_id, b.labels FROM detection_batches b WHERE b.batch_id = ? AND b.close_reason = 'fast_path'"
        " AND NOT EXISTS (SELECT 1 FROM risk_assessments r WHERE r.batch_id = b.batch_id"
        " AND r.status IN ('ok', 'floor_only'))",
        [batch_id],
    ).fetchone()
    return None if row is None else fast_path_unassessed_alert(batch_id, row[0], row[1] or [])


def alert_stored(conn: duckdb.DuckDBPyConnection, alert_id: str) -> bool:
    return conn.execute("SELECT 1 FROM alerts WHERE alert_id = ?", [alert_id]).fetchone() is not None


def last_webhook_attempt(conn: duckdb.DuckDBPyConnection, camera_id: str) -> datetime | None:
    """When the camera's webhook was last tried (sent or failed): the start of its cooldown."""
    row = conn.execute(
        "SELECT max(created_at) FROM alerts"
        " WHERE camera_id = ? AND (webhook_status = 'sent' OR webhook_status LIKE 'failed%')",
        [camera_id],
    ).fetchone()
    return None if row is None else row[0]


def save_alert(conn: duckdb.DuckDBPyConnection, alert: Alert, webhook_status: str, created_at: datetime) -> None:
    conn.execute(
        "INSERT INTO alerts (alert_id, batch_id, camera_id, risk_level, risk_score, summary, kind, webhook_status,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            alert.alert_id,
            alert.batch_id,
            alert.camera_id,
            alert.risk_level,
            alert.risk_score,
            alert.summary,
            alert.kind,
            webhook_status,
            created_at,
        ],
    )
