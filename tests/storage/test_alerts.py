"""The `alerts` table and the queries alerts are decided from, on a real DuckDB file (webhook posting is tested in
tests/dagster/test_alert_webhook.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from hsi_dagster.core.verdict.alerts import PROMPT_TOO_LARGE, fast_path_unassessed_alert, risk_alert
from hsi_dagster.storage.alerts import (
    alert_stored,
    last_webhook_attempt,
    risk_alert_for,
    save_alert,
    unassessed_fast_path_alert,
)
from hsi_dagster.storage.db import connect

NOW = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)


@pytest.fixture
def conn(tmp_path: Path):
    with connect(tmp_path / "hsi.duckdb") as connection:
        yield connection


def _batch(conn, batch_id: str, camera_id: str, close_reason: str, labels: list[str] | None) -> None:
    conn.execute(
        "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
        " detection_count, detection_ids, labels, recorded_at) VALUES (?, ?, ?, ?, ?, ?, 1, ['d'], ?, ?)",
        [batch_id, camera_id, NOW, NOW, NOW, close_reason, labels, NOW],
    )


def _assessment(conn, batch_id: str, camera_id: str, level: str | None, status: str = "ok") -> None:
    conn.execute(
        "INSERT INTO risk_assessments (batch_id, camera_id, risk_score, risk_level, summary, status, assessed_at)"
        " VALUES (?, ?, 80, ?, 'text', ?, ?)",
        [batch_id, camera_id, level, status, NOW],
    )


def test_risk_alert_for_reads_only_valid_assessments(conn) -> None:
    _assessment(conn, "ok-high", "porch", "high")
    _assessment(conn, "ok-low", "porch", "low")
    _assessment(conn, "invalid-high", "porch", "high", status="invalid_output")
    assert risk_alert_for(conn, "ok-high") == risk_alert("ok-high", "porch", "high", 80, "text")
    assert risk_alert_for(conn, "ok-low") is None
    assert risk_alert_for(conn, "invalid-high") is None
    assert risk_alert_for(conn, "unknown") is None


def test_unassessed_fast_path_alert_only_for_fast_path_batches_without_a_valid_assessment(conn) -> None:
    _batch(conn, "fp-none", "porch", "fast_path", ["person"])
    _batch(conn, "fp-invalid", "porch", "fast_path", ["person"])
    _assessment(conn, "fp-invalid", "porch", "high", status="invalid_output")
    _batch(conn, "fp-ok", "porch", "fast_path", ["person"])
    _assessment(conn, "fp-ok", "porch", "low")
    _batch(conn, "window", "porch", "window", ["person"])
    _batch(conn, "fp-no-labels", "garage", "fast_path", None)
    assert unassessed_fast_path_alert(conn, "fp-none") == fast_path_unassessed_alert("fp-none", "porch", ["person"])
    assert unassessed_fast_path_alert(conn, "fp-invalid") == fast_path_unassessed_alert(
        "fp-invalid", "porch", ["person"]
    )
    assert unassessed_fast_path_alert(conn, "fp-ok") is None
    assert unassessed_fast_path_alert(conn, "window") is None
    assert unassessed_fast_path_alert(conn, "missing") is None
    assert unassessed_fast_path_alert(conn, "fp-no-labels") == fast_path_unassessed_alert("fp-no-labels", "garage", [])


def test_saved_alert_is_stored_once(conn) -> None:
    alert = risk_alert("b1", "porch", "critical", 95, "text")
    assert alert is not None
    assert not alert_stored(conn, "b1:risk")
    save_alert(conn, alert, "sent", NOW)
    assert alert_stored(conn, "b1:risk")
    with pytest.raises(duckdb.ConstraintException):
        save_alert(conn, alert, "sent", NOW)
    assert conn.execute("SELECT camera_id, kind, risk_level, webhook_status, created_at FROM alerts").fetchall() == [
        ("porch", "risk", "critical", "sent", NOW)
    ]


def test_cooldown_starts_at_the_last_post_sent_or_failed_per_camera(conn) -> None:
    def save(batch_id: str, camera_id: str, status: str, at: datetime) -> None:
        alert = risk_alert(batch_id, camera_id, "high", 80, "text")
        assert alert is not None
        save_alert(conn, alert, status, at)

    assert last_webhook_attempt(conn, "porch") is None
    save("b1", "porch", "sent", NOW)
    save("b2", "porch", "failed: http://127.0.0.1:9/hook: HTTP 500", NOW + timedelta(seconds=10))
    save("b3", "porch", "cooldown", NOW + timedelta(seconds=20))  # not posted: does not extend the cooldown
    save("b4", "porch", "disabled", NOW + timedelta(seconds=30))
    save("b5", "garage", "sent", NOW + timedelta(seconds=40))
    assert last_webhook_attempt(conn, "porch") == NOW + timedelta(seconds=10)
    assert last_webhook_attempt(conn, "garage") == NOW + timedelta(seconds=40)
    assert last_webhook_attempt(conn, "side_gate") is None


def test_a_batch_whose_prompt_cannot_fit_alerts_whatever_its_close_reason(conn) -> None:
    """#15 item 10: a batch stored as prompt_too_large (its floor does not fit a slot) alerts like an unassessed
    fast-path batch, with the reason; a fast-path batch in that state gets the same alert."""
    _batch(conn, "window-big", "garage", "window", ["person", "person"])
    _assessment(conn, "window-big", "garage", None, status=PROMPT_TOO_LARGE)
    _batch(conn, "fp-big", "porch", "fast_path", ["person"])
    _assessment(conn, "fp-big", "porch", None, status=PROMPT_TOO_LARGE)
    alert = unassessed_fast_path_alert(conn, "window-big")
    assert alert is not None and (alert.alert_id, alert.kind, alert.camera_id) == (
        "window-big:unassessed",
        "prompt_too_large",
        "garage",
    )
    assert alert.risk_level is None and "does not fit one llama-server slot" in (alert.summary or "")
    big = unassessed_fast_path_alert(conn, "fp-big")
    assert big is not None and big.kind == "prompt_too_large" and big.alert_id == "fp-big:unassessed"
