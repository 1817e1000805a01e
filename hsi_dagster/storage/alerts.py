"""High-risk notifications: an `alerts` row for every high/critical assessment, a webhook post (off by default)
with a per-camera cooldown, and an alert without LLM text when a fast-path batch could not be assessed.

A webhook that fails never fails the caller: its outcome is stored in `alerts.webhook_status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx

ALERT_LEVELS = ("high", "critical")
WEBHOOK_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Alert:
    alert_id: str
    batch_id: str
    camera_id: str
    kind: str  # risk | fast_path_unassessed
    risk_level: str | None
    risk_score: int | None
    summary: str | None

    def payload(self) -> dict:
        return {
            "alert_id": self.alert_id,
            "kind": self.kind,
            "batch_id": self.batch_id,
            "camera_id": self.camera_id,
            "risk_level": self.risk_level,
            "risk_score": self.risk_score,
            "summary": self.summary,
        }


def post_webhook(url: str, payload: dict, timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> str:
    """POST the alert; returns 'sent', or 'failed: <reason>' naming the endpoint. Never raises."""
    try:
        response = httpx.post(url, json=payload, timeout=timeout)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is not an HTTPError (e.g. 'http://[::1')
        return f"failed: {url}: {type(exc).__name__}"
    if response.status_code >= 300:
        return f"failed: {url}: HTTP {response.status_code}"
    return "sent"


def _in_cooldown(conn, camera_id: str, now: datetime, cooldown_s: float) -> bool:
    last = conn.execute(
        "SELECT max(created_at) FROM alerts WHERE camera_id = ? AND (webhook_status = 'sent' OR webhook_status LIKE 'failed%')",
        [camera_id],
    ).fetchone()[0]
    return last is not None and now - last < timedelta(seconds=cooldown_s)


def raise_alert(
    conn, alert: Alert, *, webhook_url: str | None, cooldown_s: float, now: datetime | None = None
) -> str | None:
    """Store the alert once (keyed by alert_id) and post it unless the camera is in cooldown.

    Returns the webhook status, or None when this alert was already stored (a sensor re-evaluating a tick).
    """
    now = now or datetime.now(UTC)
    if conn.execute("SELECT 1 FROM alerts WHERE alert_id = ?", [alert.alert_id]).fetchone():
        return None
    if not webhook_url:
        status = "disabled"
    elif _in_cooldown(conn, alert.camera_id, now, cooldown_s):
        status = "cooldown"
    else:
        status = post_webhook(webhook_url, alert.payload())
    conn.execute(
        "INSERT INTO alerts (alert_id, batch_id, camera_id, risk_level, risk_score, summary, kind, webhook_status, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            alert.alert_id,
            alert.batch_id,
            alert.camera_id,
            alert.risk_level,
            alert.risk_score,
            alert.summary,
            alert.kind,
            status,
            now,
        ],
    )
    return status


def risk_alert_for(conn, batch_id: str) -> Alert | None:
    """The alert a stored assessment calls for, if its level is high or critical."""
    row = conn.execute(
        "SELECT camera_id, risk_level, risk_score, summary FROM risk_assessments WHERE batch_id = ? AND status = 'ok'",
        [batch_id],
    ).fetchone()
    if row is None or row[1] not in ALERT_LEVELS:
        return None
    return Alert(f"{batch_id}:risk", batch_id, row[0], "risk", row[1], row[2], row[3])


def unassessed_fast_path_alert(conn, batch_id: str) -> Alert | None:
    """A fast-path batch (a confident person) whose assessment failed still alerts, without LLM text."""
    row = conn.execute(
        "SELECT b.camera_id, b.labels FROM detection_batches b WHERE b.batch_id = ? AND b.close_reason = 'fast_path'"
        " AND NOT EXISTS (SELECT 1 FROM risk_assessments r WHERE r.batch_id = b.batch_id AND r.status = 'ok')",
        [batch_id],
    ).fetchone()
    if row is None:
        return None
    labels = ", ".join(row[1] or [])
    return Alert(
        f"{batch_id}:unassessed",
        batch_id,
        row[0],
        "fast_path_unassessed",
        None,
        None,
        f"fast-path detection ({labels}) could not be assessed by the LLM",
    )
