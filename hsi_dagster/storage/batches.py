"""The DuckDB side of batching (contract section 2): which batches are closed, and recording them.

Batches are not stored until recorded: `pending_closed_batches` recomputes them with `core.intake.batching` from the
detections not yet in a recorded batch (`detections.batch_id IS NULL`). Because batching is greedy from the
first unassigned detection, removing recorded batches never changes the batches that follow, so the same
input always gives the same batch ids (the Dagster partition keys).

Late detections: `detections.is_late` is set when the detection is loaded if its camera already has a recorded
regular (not fast-path) batch closing after the detection's ts (see ingest.py). Such a detection is not lost:
it is batched by the same rules with the other unassigned detections, into a new batch whose
`detection_batches.has_late` is TRUE (it holds at least one late detection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

from hsi_dagster.core.frigate.mapping import tracking_after
from hsi_dagster.core.intake.batching import (
    OPEN,
    Batch,
    BatchRules,
    DetectionRef,
    assign_batches,
    batch_id_camera_prefix,
    camera_key,
    closed_batches,
    next_close,
)
from hsi_dagster.core.intake.detections import loads_enrichment

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BatchNotFound(LookupError):
    """No recorded batch has this id and the unrecorded detections do not form it (as of the given time)."""


class BatchNotClosed(BatchNotFound):
    """The batch exists but is still open as of the given time, so its detections may still change."""


class BatchConflict(RuntimeError):
    """Another writer assigned some of the batch's detections while it was being recorded; retry."""


def _utc(as_of: datetime) -> datetime:
    if as_of.tzinfo is None:
        raise ValueError(f"as_of must be timezone-aware, got {as_of!r}")
    return as_of.astimezone(UTC)


def _refs(conn: duckdb.DuckDBPyConnection, as_of: datetime, cameras: Sequence[str] | None = None) -> list[DetectionRef]:
    """Unassigned detections with ts <= as_of (ts fetched as integer microseconds: no per-row tz conversion), with
    their track and whether its source still tracks it (a Frigate MQTT event's type: `tracking_after`)."""
    sql = (
        "SELECT detection_id, camera_id, epoch_us(ts) AS us, label, confidence, track_id, "
        "CASE WHEN json_extract_string(enrichment, '$.frigate.source') = 'mqtt' "
        "THEN json_extract_string(enrichment, '$.frigate.type') END AS frigate_type "
        "FROM detections WHERE batch_id IS NULL AND ts <= $as_of"
    )
    params: dict[str, Any] = {"as_of": as_of}
    if cameras is not None:
        if not cameras:
            return []
        sql += " AND list_contains($cameras, camera_id)"
        params["cameras"] = list(cameras)
    columns = conn.execute(sql, params).fetchnumpy()
    names = ("detection_id", "camera_id", "us", "label", "confidence", "track_id", "frigate_type")
    return [
        DetectionRef(
            detection_id,
            camera_id,
            EPOCH + timedelta(microseconds=micros),
            label,
            confidence,
            track_id,
            tracking_after(frigate_type),
        )
        for detection_id, camera_id, micros, label, confidence, track_id, frigate_type in zip(
            *(columns[name].tolist() for name in names), strict=True
        )
    ]


def pending_closed_batches(
    conn: duckdb.DuckDBPyConnection, rules: BatchRules, as_of: datetime, *, limit: int | None = None
) -> list[Batch]:
    """Batches closed as of `as_of` and not recorded yet, in processing order (closes_at, batch_id).

    Read-only; one scan of the unassigned detections, so a sensor can call it every tick.
    """
    closed = pending_windows(conn, rules, as_of).closed
    return closed if limit is None else closed[: max(0, limit)]


@dataclass(frozen=True)
class PendingWindows:
    closed: list[Batch]  # closed as of the given time, not recorded yet, in processing order
    next_close: datetime | None  # when the earliest still-open window closes if nothing joins it
    next_in_view: datetime | None  # the earliest unassigned detection later than the given time

    @property
    def next_change(self) -> datetime | None:
        """The earliest later `as_of` that may close a window with no new detection loaded: a sensor waits for it."""
        return min((t for t in (self.next_close, self.next_in_view) if t is not None), default=None)


def pending_windows(conn: duckdb.DuckDBPyConnection, rules: BatchRules, as_of: datetime) -> PendingWindows:
    """The closed windows (pending_closed_batches) and when that answer may change next."""
    as_of = _utc(as_of)
    batches = assign_batches(_refs(conn, as_of), rules)
    [later] = conn.execute(
        "SELECT min(ts) FROM detections WHERE batch_id IS NULL AND ts > $as_of", {"as_of": as_of}
    ).fetchone() or [None]
    return PendingWindows(
        closed_batches(batches, as_of), next_close(batches, as_of), later.astimezone(UTC) if later else None
    )


def _batch_from_row(row: dict[str, Any]) -> Batch:
    return Batch(
        batch_id=row["batch_id"],
        camera_id=row["camera_id"],
        started_at=row["started_at"].astimezone(UTC),
        last_ts=row["last_ts"].astimezone(UTC),
        closes_at=row["closes_at"].astimezone(UTC),
        close_reason=row["close_reason"],
        detection_ids=tuple(row["detection_ids"]),
        labels=tuple(row["labels"] or ()),
    )


def _rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def _stored_row(conn: duckdb.DuckDBPyConnection, batch_id: str) -> dict[str, Any] | None:
    rows = _rows(conn.execute("SELECT * FROM detection_batches WHERE batch_id = ?", [batch_id]))
    return rows[0] if rows else None


def batch_camera_id(conn: duckdb.DuckDBPyConnection, batch_id: str) -> str:
    """The camera of a recorded batch; BatchNotFound if it is not recorded."""
    row = conn.execute("SELECT camera_id FROM detection_batches WHERE batch_id = ?", [batch_id]).fetchone()
    if row is None:
        raise BatchNotFound(f"batch {batch_id} is not recorded (record it first; see record_batch)")
    return row[0]


def batch_ids_closed_before(conn: duckdb.DuckDBPyConnection, cutoff: datetime) -> set[str]:
    """Ids of recorded batches whose window closed before `cutoff` (the retention job's candidates)."""
    rows = conn.execute("SELECT batch_id FROM detection_batches WHERE closes_at < ?", [_utc(cutoff)]).fetchall()
    return {batch_id for (batch_id,) in rows}


def stored_batch(conn: duckdb.DuckDBPyConnection, batch_id: str) -> Batch | None:
    """The recorded batch with this id, or None."""
    row = _stored_row(conn, batch_id)
    return None if row is None else _batch_from_row(row)


def _find_pending(conn: duckdb.DuckDBPyConnection, batch_id: str, rules: BatchRules, as_of: datetime) -> Batch:
    prefix = batch_id_camera_prefix(batch_id)
    candidates = [
        camera
        for (camera,) in conn.execute(
            "SELECT DISTINCT camera_id FROM detections WHERE batch_id IS NULL AND ts <= ?", [as_of]
        ).fetchall()
        if camera_key(camera) == prefix
    ]
    for batch in assign_batches(_refs(conn, as_of, candidates), rules):
        if batch.batch_id == batch_id:
            if not batch.closed(as_of):
                raise BatchNotClosed(
                    f"batch {batch_id} is still open as of {as_of.isoformat()} "
                    f"(it closes at {batch.closes_at.isoformat()} unless a later detection opens the next batch)"
                )
            return batch
    raise BatchNotFound(
        f"batch {batch_id} not found: it is not recorded and the unrecorded detections do not form it "
        f"as of {as_of.isoformat()}"
    )


def _record(conn: duckdb.DuckDBPyConnection, batch: Batch) -> None:
    """Inside the caller's transaction: claim the detections still unassigned, then write the batch row."""
    ids = list(batch.detection_ids)
    claimed = conn.execute(
        """UPDATE detections SET batch_id = $batch_id
           WHERE camera_id = $camera AND ts BETWEEN $first AND $last AND batch_id IS NULL
             AND list_contains($ids, detection_id)""",
        {
            "batch_id": batch.batch_id,
            "camera": batch.camera_id,
            "first": batch.started_at,
            "last": batch.last_ts,
            "ids": ids,
        },
    ).fetchone()
    if claimed is None or claimed[0] != len(ids):
        raise BatchConflict(
            f"batch {batch.batch_id}: {len(ids) - (claimed[0] if claimed else 0)} of its {len(ids)} detections were "
            "assigned meanwhile by another writer; retry"
        )
    has_late = conn.execute(
        "SELECT coalesce(bool_or(is_late), false) FROM detections WHERE batch_id = ?", [batch.batch_id]
    ).fetchone()[0]  # type: ignore[index]
    conn.execute(_INSERT_BATCH, _batch_params(batch, bool(has_late)))


_INSERT_BATCH = """INSERT OR REPLACE INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at,
    close_reason, detection_count, detection_ids, labels, has_late, recorded_at)
    VALUES ($batch_id, $camera, $started, $last, $closes, $reason, $count, $ids, $labels, $late, now())"""


def _batch_params(batch: Batch, has_late: bool) -> dict[str, Any]:
    return {
        "batch_id": batch.batch_id,
        "camera": batch.camera_id,
        "started": batch.started_at,
        "last": batch.last_ts,
        "closes": batch.closes_at,
        "reason": batch.close_reason,
        "count": batch.detection_count,
        "ids": list(batch.detection_ids),
        "labels": list(batch.labels),
        "late": has_late,
    }


def record_batch(conn: duckdb.DuckDBPyConnection, batch_id: str, rules: BatchRules, as_of: datetime) -> Batch:
    """Record one closed batch (its detection_batches row and its detections' batch_id) in one transaction.

    Idempotent: an already recorded batch is returned unchanged. BatchNotFound if the id is neither recorded nor
    formed by the unrecorded detections as of `as_of`; BatchNotClosed (a BatchNotFound) if it is still open.
    """
    as_of = _utc(as_of)
    existing = stored_batch(conn, batch_id)
    if existing is not None:
        return existing
    batch = _find_pending(conn, batch_id, rules, as_of)
    conn.execute("BEGIN TRANSACTION")
    try:
        existing = stored_batch(conn, batch_id)
        if existing is None:
            _record(conn, batch)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return existing or batch


def list_batches(conn: duckdb.DuckDBPyConnection, rules: BatchRules, as_of: datetime) -> list[dict[str, Any]]:
    """Recorded batches that started by `as_of`, plus the pending ones (closed, or `open`), for `hsi batches`.

    Each: batch_id, camera_id, started_at, last_ts, closes_at (aware UTC datetimes), close_reason (`open` for a
    pending batch not yet closed), detection_ids, detection_count, has_late, state (recorded|closed|open).
    Ordered by started_at, camera_id, batch_id.
    """
    as_of = _utc(as_of)
    out: list[dict[str, Any]] = []
    for row in _rows(conn.execute("SELECT * FROM detection_batches WHERE started_at <= ?", [as_of])):
        batch = _batch_from_row(row)
        out.append(_listing(batch, batch.close_reason, "recorded", bool(row["has_late"])))
    late = {
        detection_id
        for (detection_id,) in conn.execute(
            "SELECT detection_id FROM detections WHERE batch_id IS NULL AND is_late AND ts <= ?", [as_of]
        ).fetchall()
    }
    for batch in assign_batches(_refs(conn, as_of), rules):
        closed = batch.closed(as_of)
        out.append(
            _listing(
                batch,
                batch.close_reason if closed else OPEN,
                "closed" if closed else "open",
                any(d in late for d in batch.detection_ids),
            )
        )
    out.sort(key=lambda b: (b["started_at"], b["camera_id"], b["batch_id"]))
    return out


def _listing(batch: Batch, close_reason: str, state: str, has_late: bool) -> dict[str, Any]:
    return {
        "batch_id": batch.batch_id,
        "camera_id": batch.camera_id,
        "started_at": batch.started_at,
        "last_ts": batch.last_ts,
        "closes_at": batch.closes_at,
        "close_reason": close_reason,
        "detection_ids": list(batch.detection_ids),
        "detection_count": batch.detection_count,
        "has_late": has_late,
        "state": state,
    }


def _detection_rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Detection rows as the pipeline reads them: times in UTC, `enrichment` parsed."""
    detections = _rows(cursor)
    for detection in detections:
        detection["ts"] = detection["ts"].astimezone(UTC)
        detection["ingested_at"] = detection["ingested_at"].astimezone(UTC)
        detection["enrichment"] = loads_enrichment(detection["enrichment"])
    return detections


def load_batch(conn: duckdb.DuckDBPyConnection, batch_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A recorded batch's row and its detections (all columns, ts order, `enrichment` parsed, times in UTC)."""
    row = _stored_row(conn, batch_id)
    if row is None:
        raise BatchNotFound(f"batch {batch_id} is not recorded (record it first; see record_batch)")
    for key in ("started_at", "last_ts", "closes_at", "recorded_at"):
        row[key] = row[key].astimezone(UTC)
    detections = _detection_rows(
        conn.execute(
            # camera and time range first: zone maps skip most of a large table
            """SELECT * FROM detections
               WHERE camera_id = $camera AND ts BETWEEN $first AND $last AND batch_id = $batch_id
               ORDER BY ts, detection_id""",
            {"camera": row["camera_id"], "first": row["started_at"], "last": row["last_ts"], "batch_id": batch_id},
        )
    )
    return row, detections


def track_detections_before(
    conn: duckdb.DuckDBPyConnection,
    camera_id: str,
    track_ids: Sequence[str],
    since: datetime,
    before: datetime,
    limit: int,
) -> list[dict[str, Any]]:
    """Detections of these tracks on this camera in [since, before), wherever they are batched (or not yet): what a
    fast-path batch's track has shown so far. The latest `limit`, returned in ts order, shaped as `load_batch`'s."""
    if not track_ids:
        return []
    return _detection_rows(
        conn.execute(
            """SELECT * FROM (
                   SELECT * FROM detections
                   WHERE camera_id = $camera AND ts >= $since AND ts < $before AND list_contains($tracks, track_id)
                   ORDER BY ts DESC, detection_id DESC LIMIT $limit)
               ORDER BY ts, detection_id""",
            {"camera": camera_id, "since": since, "before": before, "tracks": list(track_ids), "limit": limit},
        )
    )
