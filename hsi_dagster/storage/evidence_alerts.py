"""The `evidence_alerts` table (migration 6): alerts decided from detections alone, before any LLM verdict.

One row per alert_key (camera + track + cooldown slot, core/verdict/evidence_alerts.py). The row is claimed BEFORE the
webhook post (webhook_status 'pending') and its status written after: a tick that dies between the two leaves a
pending row, which the next pass posts (`pending_evidence_alerts`); a tick that runs again finds the key and sends
nothing twice. Other sinks (MQTT) read `evidence_alerts_after`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

from hsi_dagster.core.intake.detections import loads_enrichment
from hsi_dagster.core.verdict.evidence_alerts import EvidenceAlert

PENDING = "pending"
CANDIDATE_LOOKBACK = timedelta(minutes=10)  # how far back a track's earlier detections are read
MAX_NEW_PER_PASS = 5000

_COLUMNS = (
    "alert_key, camera_id, track_id, detection_id, risk_score, risk_level, reasons, detected_at, created_at,"
    " batch_id, webhook_status"
)


def evidence_candidates(
    conn: duckdb.DuckDBPyConnection, ingested_after: datetime, seen_after: datetime
) -> tuple[list[dict[str, Any]], list[str]]:
    """(detections to judge, ids of the new ones). The new ones were ingested after `ingested_after` and seen
    (`ts`) after `seen_after`: live detections, not a replay of last week (at most MAX_NEW_PER_PASS, oldest first).
    The detections to judge add, per camera, the earlier ones within CANDIDATE_LOOKBACK (a track's detections seen
    so far, objects nearby)."""
    new = conn.execute(
        "SELECT detection_id, camera_id, ts FROM detections WHERE ingested_at > ? AND ts > ?"
        " ORDER BY ingested_at, detection_id LIMIT ?",
        [ingested_after, seen_after, MAX_NEW_PER_PASS],
    ).fetchall()
    if not new:
        return [], []
    spans: dict[str, tuple[datetime, datetime]] = {}
    for _, camera_id, ts in new:
        low, high = spans.get(camera_id, (ts, ts))
        spans[camera_id] = (min(low, ts), max(high, ts))
    rows: list[dict[str, Any]] = []
    for camera_id, (low, high) in sorted(spans.items()):
        cursor = conn.execute(
            "SELECT detection_id, camera_id, ts, label, confidence, track_id, zone, enrichment, is_late"
            " FROM detections WHERE camera_id = ? AND ts BETWEEN ? AND ? ORDER BY ts, detection_id",
            [camera_id, low - CANDIDATE_LOOKBACK, high + timedelta(seconds=60)],
        )
        names = [d[0] for d in cursor.description]
        for values in cursor.fetchall():
            row = dict(zip(names, values, strict=True))
            row["ts"] = row["ts"].astimezone(UTC)
            row["enrichment"] = loads_enrichment(row["enrichment"])
            rows.append(row)
    return rows, [row[0] for row in new]


def claim_evidence_alert(conn: duckdb.DuckDBPyConnection, alert: EvidenceAlert, now: datetime) -> bool:
    """Store the alert as pending unless its key is stored already; True when this call stored it."""
    inserted = conn.execute(
        f"INSERT INTO evidence_alerts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)"
        " ON CONFLICT (alert_key) DO NOTHING RETURNING alert_key",
        [
            alert.alert_key,
            alert.camera_id,
            alert.track_id,
            alert.detection_id,
            alert.risk_score,
            alert.risk_level,
            json.dumps(list(alert.reasons), ensure_ascii=False),
            alert.detected_at,
            now,
            PENDING,
        ],
    ).fetchall()
    return bool(inserted)


VISIT_ALREADY_ALERTED = "visit already alerted"  # the status of an alert its visit already raised at its level


def visit_alerted_status(visit_id: str) -> str:
    return f"{VISIT_ALREADY_ALERTED}: {visit_id}"


def visit_alerted(webhook_status: str | None) -> str | None:
    """The visit a 'visit already alerted: <id>' status names (no webhook post, no second MQTT event), else None."""
    prefix = f"{VISIT_ALREADY_ALERTED}: "
    return webhook_status.removeprefix(prefix) if webhook_status and webhook_status.startswith(prefix) else None


def set_webhook_status(conn: duckdb.DuckDBPyConnection, alert_key: str, status: str) -> None:
    conn.execute("UPDATE evidence_alerts SET webhook_status = ? WHERE alert_key = ?", [status, alert_key])


def pending_evidence_alerts(conn: duckdb.DuckDBPyConnection, older_than: datetime) -> list[EvidenceAlert]:
    """Alerts claimed before `older_than` whose post never happened (their tick died in between)."""
    rows = conn.execute(
        "SELECT alert_key, camera_id, track_id, detection_id, risk_score, risk_level, reasons, detected_at"
        " FROM evidence_alerts WHERE webhook_status = ? AND created_at < ? ORDER BY created_at, alert_key",
        [PENDING, older_than],
    ).fetchall()
    return [
        EvidenceAlert(key, camera, track, detection, score, level, tuple(json.loads(reasons)), detected.astimezone(UTC))
        for key, camera, track, detection, score, level, reasons, detected in rows
    ]


def evidence_alerts_after(conn: duckdb.DuckDBPyConnection, created_after: datetime, limit: int) -> list[dict]:
    """Rows created after `created_after`, oldest first, `reasons` as a list (for other sinks: MQTT)."""
    cursor = conn.execute(
        f"SELECT {_COLUMNS} FROM evidence_alerts WHERE created_at > ? ORDER BY created_at, alert_key LIMIT ?",
        [created_after, limit],
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    for row in rows:
        row["reasons"] = json.loads(row["reasons"])
    return rows


def alerts_for_batch(conn: duckdb.DuckDBPyConnection, batch_id: str) -> list[dict]:
    """Evidence alerts decided on one of the batch's detections, highest score first."""
    rows = conn.execute(
        "SELECT alert_key, risk_score, risk_level, reasons FROM evidence_alerts WHERE detection_id IN"
        " (SELECT unnest(detection_ids) FROM detection_batches WHERE batch_id = ?) ORDER BY risk_score DESC, alert_key",
        [batch_id],
    ).fetchall()
    return [
        {"alert_key": key, "risk_score": score, "risk_level": level, "reasons": json.loads(reasons)}
        for key, score, level, reasons in rows
    ]


def attach_batch(conn: duckdb.DuckDBPyConnection, batch_id: str, alert_keys: list[str]) -> None:
    """Fill batch_id on the batch's evidence alerts (when the verdict is stored)."""
    if alert_keys:
        conn.execute(
            "UPDATE evidence_alerts SET batch_id = ?"
            " WHERE batch_id IS NULL AND alert_key IN (SELECT unnest(?::VARCHAR[]))",
            [batch_id, alert_keys],
        )
