"""What the verdict publisher sent on MQTT, keyed by batch (migration 8), and what it has still to send.

- `mqtt_outbox`: one row per verdict (`verdict:<batch_id>`) or evidence alert (`evidence:<alert_key>`) once every
  message it called for was acknowledged by the broker (QoS 1 PUBACK). What has no row is pending: a restart
  sends it, a broker that was down gets it when it is back; what has a row is never sent again.
- `mqtt_cameras`: the cameras with Home Assistant entities, the retained topics each owns (to remove them), a hash
  of its discovery payloads (re-sent when they change) and the window of the verdict in its retained state.
- `mqtt_publisher`: from when verdicts are published (the first tick: the hour before it; older verdicts never
  reach a phone), and the last connection outcome for `hsi mqtt status`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import duckdb

from hsi_dagster.core.outbound.mqtt_messages import StoredEvidenceAlert, StoredVerdict, reasons_from
from hsi_dagster.core.verdict.final import VERDICT_STATUSES
from hsi_dagster.storage.evidence_alerts import visit_alerted

PUBLISHER = "verdicts"
FIRST_TICK_LOOKBACK = timedelta(hours=1)
MAX_FACTOR_REASONS = 5


@dataclass(frozen=True)
class CameraRecord:
    camera_id: str
    retained_topics: tuple[str, ...]
    discovery_sha256: str
    last_window_start: datetime | None
    removed_at: datetime | None


@dataclass(frozen=True)
class Published:
    """A verdict or alert whose messages the broker acknowledged."""

    key: str
    camera_id: str
    batch_id: str | None
    sent: str  # state, event, state+event, superseded (its state was replaced by a newer verdict's in the same tick)
    window_start: datetime | None


def verdict_key(batch_id: str) -> str:
    return f"verdict:{batch_id}"


def evidence_key(alert_key: str) -> str:
    return f"evidence:{alert_key}"


# ------------------------------------------------------------------------------------------------ publisher state
def publisher_since(conn: duckdb.DuckDBPyConnection, now: datetime, name: str = PUBLISHER) -> datetime:
    """From when verdicts are published (or, name `frigate_writeback`, written back); set at the first call: the
    hour before `now`."""
    row = conn.execute("SELECT since FROM mqtt_publisher WHERE name = ?", [name]).fetchone()
    if row is not None:
        return row[0]
    since = now - FIRST_TICK_LOOKBACK
    conn.execute(
        "INSERT INTO mqtt_publisher (name, since, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
        [name, since, now],
    )
    return since


def record_connection(conn: duckdb.DuckDBPyConnection, error: str | None, now: datetime) -> None:
    """The last tick's connection outcome (None = connected)."""
    conn.execute(
        "UPDATE mqtt_publisher SET last_error = ?, updated_at = ?,"
        " last_connected_at = CASE WHEN ? IS NULL THEN ? ELSE last_connected_at END WHERE name = ?",
        [error, now, error, now, PUBLISHER],
    )


# ------------------------------------------------------------------------------------------------ pending work
def outbox_exists(conn: duckdb.DuckDBPyConnection) -> bool:
    """False in a database that predates migration 8 (read-only connections never migrate)."""
    return bool(_columns(conn, "mqtt_outbox"))


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    rows = conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()
    return {row[0] for row in rows}


def _factor_reasons(assessment: Any) -> tuple[str, ...]:
    """The model's risk factors as reasons, when the evidence floor gave none."""
    try:
        data = json.loads(assessment) if isinstance(assessment, str) else assessment
    except ValueError:
        return ()
    factors = data.get("risk_factors") if isinstance(data, dict) else None
    if not isinstance(factors, list):
        return ()
    lines = []
    for factor in factors[:MAX_FACTOR_REASONS]:
        if isinstance(factor, dict) and factor.get("factor_name"):
            description = str(factor.get("description") or "").strip()
            lines.append(f"{factor['factor_name']}: {description}" if description else str(factor["factor_name"]))
    return reasons_from(lines)


def _verdicts(
    conn: duckdb.DuckDBPyConnection, where: str, params: dict[str, Any], limit: int | None = None
) -> list[StoredVerdict]:
    """Verdicts (statuses `ok` and `floor_only`, core/verdict/final.py) matching `where` (over `r`, risk_assessments,
    and `b`, detection_batches), per camera in window order (then assessment order); the floor columns (migration 6)
    and the trust columns (migration 11) when present; the batch's visit (migration 44)."""
    present = _columns(conn, "risk_assessments")
    columns = ("floor_score", "floor_reasons", "model_score", "model_level", "model_trust", "trust_reason")
    optional = ", ".join(f"r.{name}" if name in present else f"NULL AS {name}" for name in columns)
    visit_columns, visit_join = "NULL, NULL, NULL, NULL", ""
    if _columns(conn, "visit_batches"):  # migration 44; a read-only connection to an older file has none
        # the highest evidence-only alert attached to the batch or linked into its visit (one event per level)
        evidence = (
            "(SELECT CASE max(CASE a.risk_level WHEN 'critical' THEN 2 WHEN 'high' THEN 1 ELSE 0 END)"
            " WHEN 2 THEN 'critical' WHEN 1 THEN 'high' END FROM evidence_alerts a"
            " WHERE a.batch_id = r.batch_id OR ('evidence:' || a.alert_key) IN"
            " (SELECT e.batch_id FROM visit_batches e WHERE e.visit_id = vb.visit_id))"
        )
        visit_columns = f"v.visit_id, v.cameras, v.risk_level AS visit_level, {evidence} AS evidence_level"
        visit_join = "LEFT JOIN visit_batches vb ON vb.batch_id = r.batch_id LEFT JOIN visits v USING (visit_id)"
    rows = conn.execute(
        f"""SELECT r.batch_id, r.camera_id, r.risk_level, r.risk_score, r.summary, r.assessment, b.started_at,
                   r.assessed_at, {optional}, {visit_columns}
            FROM risk_assessments r LEFT JOIN detection_batches b USING (batch_id) {visit_join}
            WHERE list_contains($statuses, r.status) AND r.risk_level IS NOT NULL AND {where}
            ORDER BY r.camera_id, coalesce(b.started_at, r.assessed_at), r.assessed_at, r.batch_id"""
        + (f" LIMIT {int(limit)}" if limit is not None else ""),
        {**params, "statuses": list(VERDICT_STATUSES)},
    ).fetchall()
    verdicts = []
    for row in rows:
        batch_id, camera_id, level, score, summary, assessment, started, assessed, floor, floor_reasons, model = row[
            :11
        ]
        reasons = reasons_from(floor_reasons) or _factor_reasons(assessment)
        verdicts.append(
            StoredVerdict(
                batch_id,
                camera_id,
                level,
                score,
                summary,
                reasons,
                started,
                assessed,
                floor,
                model,
                model_level=row[11],
                model_trust=row[12],
                trust_reason=row[13],
                visit_id=row[14],
                visit_cameras=tuple(row[15] or ()),
                visit_level=row[16],
                evidence_level=row[17],
            )
        )
    return verdicts


def unpublished_verdicts(conn: duckdb.DuckDBPyConnection, since: datetime, limit: int) -> list[StoredVerdict]:
    """Verdicts since `since` with no outbox row (at most `limit`, the oldest per camera first)."""
    return _verdicts(
        conn,
        """r.assessed_at >= $since
           AND NOT EXISTS (SELECT 1 FROM mqtt_outbox o WHERE o.message_key = 'verdict:' || r.batch_id)""",
        {"since": since},
        limit,
    )


def latest_verdicts(
    conn: duckdb.DuckDBPyConnection, camera_ids: Sequence[str], before: datetime
) -> list[StoredVerdict]:
    """Each camera's newest valid verdict assessed before `before` (the publisher's start, so never one that is
    still to be published): the state a camera's entities start from."""
    return _verdicts(
        conn,
        """r.batch_id IN (SELECT arg_max(r3.batch_id, (coalesce(b3.started_at, r3.assessed_at), r3.assessed_at))
                          FROM risk_assessments r3 LEFT JOIN detection_batches b3 USING (batch_id)
                          WHERE list_contains($statuses, r3.status) AND r3.risk_level IS NOT NULL
                            AND r3.assessed_at < $before
                            AND list_contains($cameras, r3.camera_id)
                          GROUP BY r3.camera_id)""",
        {"cameras": list(camera_ids), "before": before},
    )


def unpublished_evidence_alerts(
    conn: duckdb.DuckDBPyConnection, since: datetime, limit: int
) -> list[StoredEvidenceAlert]:
    """evidence_alerts rows (INTERFACES.md) created since `since` with no outbox row, in detection order; [] until
    the table exists."""
    if not _columns(conn, "evidence_alerts"):
        return []
    rows = conn.execute(
        """SELECT alert_key, camera_id, risk_level, risk_score, reasons, detected_at, created_at, track_id, batch_id,
                  webhook_status
           FROM evidence_alerts a
           WHERE a.created_at >= $since
             AND NOT EXISTS (SELECT 1 FROM mqtt_outbox o WHERE o.message_key = 'evidence:' || a.alert_key)
           ORDER BY camera_id, detected_at, alert_key
           LIMIT $limit""",
        {"since": since, "limit": limit},
    ).fetchall()
    return [
        StoredEvidenceAlert(
            key, camera, level, score, reasons_from(reasons), detected, created, track, batch, visit_alerted(status)
        )
        for key, camera, level, score, reasons, detected, created, track, batch, status in rows
    ]


def backlog(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Pending verdicts and evidence alerts per camera (what the next tick would send)."""
    row = conn.execute("SELECT since FROM mqtt_publisher WHERE name = ?", [PUBLISHER]).fetchone()
    if row is None:
        return {}
    counts: dict[str, int] = {}
    pending: list[StoredVerdict | StoredEvidenceAlert] = [
        *unpublished_verdicts(conn, row[0], 1_000_000),
        *unpublished_evidence_alerts(conn, row[0], 1_000_000),
    ]
    for item in pending:
        counts[item.camera_id] = counts.get(item.camera_id, 0) + 1
    return counts


def assessed_cameras(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """Every camera with a stored verdict (the cameras when no camera profile file names them)."""
    rows = conn.execute(
        "SELECT DISTINCT camera_id FROM risk_assessments WHERE list_contains(?, status) ORDER BY 1",
        [list(VERDICT_STATUSES)],
    ).fetchall()
    return [row[0] for row in rows]


# ------------------------------------------------------------------------------------------------ cameras
def cameras(conn: duckdb.DuckDBPyConnection) -> dict[str, CameraRecord]:
    rows = conn.execute(
        "SELECT camera_id, retained_topics, discovery_sha256, last_window_start, removed_at FROM mqtt_cameras"
    ).fetchall()
    return {
        camera: CameraRecord(camera, tuple(json.loads(topics)), sha, window, removed)
        for camera, topics, sha, window, removed in rows
    }


def record_discovery(
    conn: duckdb.DuckDBPyConnection, camera_id: str, topics: Sequence[str], sha256: str, now: datetime
) -> None:
    conn.execute(
        """INSERT INTO mqtt_cameras (camera_id, retained_topics, discovery_sha256, discovered_at)
           VALUES (?, ?, ?, ?)
           ON CONFLICT (camera_id) DO UPDATE SET retained_topics = excluded.retained_topics,
               discovery_sha256 = excluded.discovery_sha256, discovered_at = excluded.discovered_at,
               removed_at = NULL""",
        [camera_id, json.dumps(list(topics)), sha256, now],
    )


def record_removal(conn: duckdb.DuckDBPyConnection, camera_id: str, now: datetime) -> None:
    conn.execute(
        "UPDATE mqtt_cameras SET removed_at = ?, discovery_sha256 = '', last_window_start = NULL WHERE camera_id = ?",
        [now, camera_id],
    )


# ------------------------------------------------------------------------------------------------ published
def record_published(conn: duckdb.DuckDBPyConnection, published: Iterable[Published], now: datetime) -> None:
    """Outbox rows for what the broker acknowledged, and each camera's retained-state window, in one transaction."""
    items = list(published)
    if not items:
        return
    states: dict[str, datetime | None] = {}
    for item in items:  # the newest window each camera's retained state now holds (units come oldest first)
        if "state" in item.sent.split("+"):
            states[item.camera_id] = item.window_start
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(  # one statement for the group (executemany costs milliseconds per row)
            """INSERT INTO mqtt_outbox (message_key, camera_id, batch_id, sent, window_start, published_at)
               SELECT unnest($keys), unnest($cameras), unnest($batches), unnest($sent), unnest($windows), $now
               ON CONFLICT (message_key) DO NOTHING""",
            {
                "keys": [p.key for p in items],
                "cameras": [p.camera_id for p in items],
                "batches": [p.batch_id for p in items],
                "sent": [p.sent for p in items],
                "windows": [p.window_start for p in items],
                "now": now,
            },
        )
        for camera_id, window in states.items():
            conn.execute("UPDATE mqtt_cameras SET last_window_start = ? WHERE camera_id = ?", [window, camera_id])
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise


def last_publish_per_camera(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Per camera: the last acknowledged publish, what it was, its batch, and whether the camera's entities exist."""
    rows = conn.execute(
        """SELECT o.camera_id, max(o.published_at), arg_max(o.sent, o.published_at),
                  arg_max(o.batch_id, o.published_at), count(*),
                  any_value(c.removed_at IS NULL AND c.camera_id IS NOT NULL)
           FROM mqtt_outbox o LEFT JOIN mqtt_cameras c USING (camera_id)
           GROUP BY o.camera_id ORDER BY o.camera_id"""
    ).fetchall()
    return [
        {
            "camera_id": camera,
            "last_published_at": published.isoformat() if published else None,
            "last_sent": sent,
            "last_batch_id": batch,
            "published": count,
            "entities": bool(entities),
        }
        for camera, published, sent, batch, count, entities in rows
    ]


def publisher_state(conn: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT since, last_connected_at, last_error, updated_at FROM mqtt_publisher WHERE name = ?", [PUBLISHER]
    ).fetchone()
    if row is None:
        return None
    since, connected, error, updated = row
    return {
        "since": since.isoformat(),
        "last_connected_at": connected.isoformat() if connected else None,
        "last_error": error,
        "last_tick_at": updated.isoformat() if updated else None,
    }
