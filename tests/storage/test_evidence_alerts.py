"""evidence_alerts (migration 6) on a real DuckDB file: claimed once, pending ones found again, read by other sinks,
linked to their batch; the candidates are live detections only."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hsi_dagster.core.verdict.evidence_alerts import EvidenceAlert
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.evidence_alerts import (
    PENDING,
    alerts_for_batch,
    attach_batch,
    claim_evidence_alert,
    evidence_alerts_after,
    evidence_candidates,
    pending_evidence_alerts,
    set_webhook_status,
)

NOW = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
ALERT = EvidenceAlert("garage:t1:2948", "garage", "t1", "d2", 90, "critical", ("weapon: knife",), NOW)


def _detection(conn, detection_id: str, ts: datetime, ingested_at: datetime, track: str | None = "t1") -> None:
    conn.execute(
        "INSERT INTO detections (detection_id, camera_id, ts, label, confidence, track_id, enrichment, ingested_at)"
        " VALUES (?, 'garage', ?, 'person', 0.9, ?, ?, ?)",
        [detection_id, ts, track, json.dumps({"reid": {"known": False}}), ingested_at],
    )


def test_an_alert_is_claimed_once_and_a_pending_one_is_found_again(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        assert claim_evidence_alert(conn, ALERT, NOW)
        assert not claim_evidence_alert(conn, ALERT, NOW + timedelta(seconds=3))  # a repeated tick: nothing twice
        assert pending_evidence_alerts(conn, NOW) == []  # just claimed: its tick is still posting it
        assert pending_evidence_alerts(conn, NOW + timedelta(seconds=31)) == [ALERT]  # its tick died before the post
        set_webhook_status(conn, ALERT.alert_key, "sent")
        assert pending_evidence_alerts(conn, NOW + timedelta(seconds=31)) == []
        rows = evidence_alerts_after(conn, NOW - timedelta(seconds=1), 10)
    assert len(rows) == 1 and rows[0]["reasons"] == ["weapon: knife"] and rows[0]["webhook_status"] == "sent"
    assert rows[0]["batch_id"] is None and rows[0]["risk_level"] == "critical" and PENDING != "sent"


def test_the_batch_that_holds_the_deciding_detection_finds_its_alert_and_is_linked(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        claim_evidence_alert(conn, ALERT, NOW)
        conn.execute(
            "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
            " detection_count, detection_ids, recorded_at)"
            " VALUES ('b1', 'garage', ?, ?, ?, 'window', 2, ['d1', 'd2'], ?)",
            [NOW, NOW, NOW, NOW],
        )
        found = alerts_for_batch(conn, "b1")
        attach_batch(conn, "b1", [a["alert_key"] for a in found])
        linked = evidence_alerts_after(conn, NOW - timedelta(seconds=1), 10)[0]["batch_id"]
    assert found == [
        {"alert_key": ALERT.alert_key, "risk_score": 90, "risk_level": "critical", "reasons": ["weapon: knife"]}
    ]
    assert linked == "b1"


def test_candidates_are_recent_live_detections_with_their_tracks_earlier_ones(tmp_path: Path) -> None:
    with connect(tmp_path / "hsi.duckdb") as conn:
        _detection(conn, "early", NOW - timedelta(minutes=3), NOW - timedelta(minutes=3))  # same track, seen before
        _detection(conn, "new", NOW - timedelta(seconds=2), NOW - timedelta(seconds=1))
        _detection(conn, "replayed", NOW - timedelta(days=2), NOW - timedelta(seconds=1), track="old")  # a replay
        rows, new_ids = evidence_candidates(conn, NOW - timedelta(seconds=60), NOW - timedelta(minutes=5))
    assert new_ids == ["new"]
    assert [r["detection_id"] for r in rows] == ["early", "new"]
    assert rows[0]["enrichment"] == {"reid": {"known": False}} and rows[0]["ts"].tzinfo is not None
