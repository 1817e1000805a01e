"""The household's corrections of stored verdicts (tables `corrections`, `correction_refusals`, migration 38).

`correct` looks up the verdict a request names (core/outbound/corrections.py checks the rest) and stores it once:
the key is the batch, the verdict's assessed_at and the level, so a repeat (a button pressed twice, an MQTT
redelivery, a retried Dagster run) is one row, and a batch assessed again keeps the correction of the verdict it
named (its level, score and time are on the row). A refusal is counted per source and field, with the last
reason: what `hsi mqtt status` shows. A corrected batch is never pruned by the retention job
(`corrected_batch_ids`); its context and prompt rows are never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import duckdb
from pydantic import ValidationError

from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.household_examples import CorrectedBatch
from hsi_dagster.core.outbound.corrections import (
    LATEST,
    CorrectedVerdict,
    Correction,
    CorrectionRefused,
    CorrectionRequest,
    Refusal,
    check_against,
    rate_refusal,
    unknown_camera,
)
from hsi_dagster.core.outbound.mqtt_messages import camera_key
from hsi_dagster.storage.schema import has_table

_VERDICT = (
    "SELECT r.batch_id, r.camera_id, r.risk_level, r.risk_score, r.assessed_at FROM risk_assessments r"
    " LEFT JOIN detection_batches b USING (batch_id)"
)


def corrections_stored(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether the database has the corrections table (migration 38)."""
    return has_table(conn, "corrections")


def _verdict(row: tuple[Any, ...] | None) -> CorrectedVerdict | None:
    return None if row is None else CorrectedVerdict(row[0], row[1], row[2], row[3], row[4])


def stored_verdict(conn: duckdb.DuckDBPyConnection, batch_id: str) -> CorrectedVerdict | None:
    """The batch's stored verdict as it is now, or None."""
    return _verdict(conn.execute(f"{_VERDICT} WHERE r.batch_id = ?", [batch_id]).fetchone())


def cameras_by_slug(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every camera with a stored verdict, by its MQTT topic level (core/outbound/mqtt_messages.py camera_key)."""
    rows = conn.execute("SELECT DISTINCT camera_id FROM risk_assessments").fetchall()
    return {camera_key(camera_id).slug: camera_id for (camera_id,) in rows}


def latest_verdict(conn: duckdb.DuckDBPyConnection, camera_id: str) -> CorrectedVerdict | None:
    """The camera's newest verdict, ordered as the MQTT state is (batch start, then assessment time)."""
    return _verdict(
        conn.execute(
            f"{_VERDICT} WHERE r.camera_id = ? ORDER BY b.started_at DESC NULLS LAST, r.assessed_at DESC LIMIT 1",
            [camera_id],
        ).fetchone()
    )


def received_since(conn: duckdb.DuckDBPyConnection, camera_id: str, source: str, since: datetime) -> int:
    row = conn.execute(
        "SELECT count(*) FROM corrections WHERE camera_id = ? AND source = ? AND received_at >= ?",
        [camera_id, source, since],
    ).fetchone()
    return int(row[0]) if row else 0


def record_refusal(conn: duckdb.DuckDBPyConnection, source: str, refusal: Refusal, at: datetime) -> None:
    """Count a refusal under its source and field (one row each: a flood of bad messages adds no rows)."""
    conn.execute(
        "INSERT INTO correction_refusals (source, field, refused, last_reason, last_at) VALUES (?, ?, 1, ?, ?)"
        " ON CONFLICT (source, field) DO UPDATE SET refused = refused + 1, last_reason = excluded.last_reason,"
        " last_at = excluded.last_at",
        [source, refusal.field, refusal.reason[:500], at],
    )


def correct(
    conn: duckdb.DuckDBPyConnection,
    request: CorrectionRequest,
    received_at: datetime,
    *,
    camera_slug: str | None = None,
    per_hour: int | None = None,
) -> tuple[Correction, bool]:
    """Store the correction (True when new, False when the same one was stored before). CorrectionRefused when the
    batch, camera or rate says no; the refusal is counted first. `camera_slug`: the MQTT topic's camera, which the
    batch must belong to; `per_hour`: the per-camera bound for this source."""
    try:
        correction = _resolve(conn, request, received_at, camera_slug, per_hour)
    except CorrectionRefused as refused:
        record_refusal(conn, request.source, refused.refusal, received_at)
        raise
    verdict = correction.verdict
    key = f"{verdict.batch_id}|{verdict.assessed_at.isoformat()}|{request.level}"
    inserted = conn.execute(
        "INSERT INTO corrections (correction_key, batch_id, camera_id, level, direction, verdict_level, verdict_score,"
        " verdict_assessed_at, source, note, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING RETURNING 1",
        [
            key,
            verdict.batch_id,
            verdict.camera_id,
            request.level,
            correction.direction,
            verdict.risk_level,
            verdict.risk_score,
            verdict.assessed_at,
            request.source,
            request.note,
            received_at,
        ],
    ).fetchall()
    return correction, bool(inserted)


def _resolve(
    conn: duckdb.DuckDBPyConnection,
    request: CorrectionRequest,
    received_at: datetime,
    camera_slug: str | None,
    per_hour: int | None,
) -> Correction:
    camera_id = None
    if camera_slug is not None:
        cameras = cameras_by_slug(conn)
        refusal = unknown_camera(camera_slug, cameras)
        if refusal:
            raise CorrectionRefused(refusal)
        camera_id = cameras[camera_slug]
        if per_hour is not None:
            count = received_since(conn, camera_id, request.source, received_at - timedelta(hours=1))
            refusal = rate_refusal(camera_slug, count, per_hour)
            if refusal:
                raise CorrectionRefused(refusal)
    if request.batch_id == LATEST:
        if camera_id is None:
            raise CorrectionRefused(Refusal("batch_id", f"{LATEST!r} needs a camera (the MQTT command topic)"))
        verdict = latest_verdict(conn, camera_id)
    else:
        verdict = stored_verdict(conn, request.batch_id)
    return check_against(request, verdict, camera_slug)


def corrections(conn: duckdb.DuckDBPyConnection, limit: int = 100) -> list[dict[str, Any]]:
    """The newest corrections first, each with whether its verdict is still the batch's current one."""
    if not has_table(conn, "corrections"):
        return []
    cursor = conn.execute(
        "SELECT c.received_at, c.camera_id, c.batch_id, c.verdict_level, c.verdict_score, c.level, c.direction,"
        " c.source, c.note, c.verdict_assessed_at, r.assessed_at IS NOT DISTINCT FROM c.verdict_assessed_at AS current"
        " FROM corrections c LEFT JOIN risk_assessments r USING (batch_id)"
        " ORDER BY c.received_at DESC, c.correction_key LIMIT ?",
        [limit],
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def correction_counts(conn: duckdb.DuckDBPyConnection) -> dict[str, dict[str, int]]:
    """Per camera: corrected verdicts by which way the latest correction of each went (lower, higher, confirmed)."""
    if not has_table(conn, "corrections"):
        return {}
    rows = conn.execute(
        "SELECT camera_id, direction, count(*) FROM ("
        "  SELECT camera_id, arg_max(direction, received_at) AS direction FROM corrections GROUP BY camera_id, batch_id"
        ") GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    counts: dict[str, dict[str, int]] = {}
    for camera_id, way, count in rows:
        counts.setdefault(camera_id, {})[way] = int(count)
    return counts


def refusal_counts(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Refused corrections per source and field, with the last reason (`hsi mqtt status`, `hsi corrections`)."""
    if not has_table(conn, "correction_refusals"):
        return []
    cursor = conn.execute(
        "SELECT source, field, refused, last_reason, last_at FROM correction_refusals ORDER BY source, field"
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def corrected_batch_ids(conn: duckdb.DuckDBPyConnection, among: Iterable[str] | None = None) -> set[str]:
    """Batches with at least one correction (kept past any retention)."""
    if not has_table(conn, "corrections"):
        return set()
    ids = {batch_id for (batch_id,) in conn.execute("SELECT DISTINCT batch_id FROM corrections").fetchall()}
    return ids if among is None else ids & set(among)


def corrected_batches(
    conn: duckdb.DuckDBPyConnection, camera_id: str, received_by: datetime, limit: int = 200
) -> list[CorrectedBatch]:
    """The camera's corrected batches with a readable stored context, newest correction first (at most `limit`):
    the latest correction of each received by `received_by` and the stored level it corrected (the prompt's worked
    examples: core/context/household_examples.py). A context that no longer parses is left out."""
    if not has_table(conn, "corrections"):
        return []
    rows = conn.execute(
        "SELECT c.batch_id, e.context, c.verdict_level, c.level, c.note, c.received_at FROM ("
        "  SELECT batch_id, arg_max(level, received_at) AS level, arg_max(note, received_at) AS note,"
        "  arg_max(verdict_level, received_at) AS verdict_level, max(received_at) AS received_at"
        "  FROM corrections WHERE camera_id = ? AND received_at <= ? GROUP BY batch_id"
        ") c JOIN enriched_contexts e USING (batch_id) ORDER BY c.received_at DESC, c.batch_id LIMIT ?",
        [camera_id, received_by, limit],
    ).fetchall()
    found = []
    for batch_id, context_json, verdict_level, level, note, received_at in rows:
        try:
            context = EnrichedContext.from_json(context_json)
        except ValidationError:
            continue
        found.append(CorrectedBatch(batch_id, context, verdict_level, level, note, received_at))
    return found


def household_labels(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Each corrected batch with a stored context and a stored verdict: its latest correction's level (the label),
    the verdict as stored now (level, status, floor score, assessment time) and the context JSON; by camera, batch
    (`hsi eval --household`)."""
    if not has_table(conn, "corrections"):
        return []
    cursor = conn.execute(
        "SELECT c.batch_id, r.camera_id, c.level AS label, e.context, r.risk_level, r.status, r.floor_score,"
        " r.assessed_at FROM ("
        "  SELECT batch_id, arg_max(level, received_at) AS level FROM corrections GROUP BY batch_id"
        ") c JOIN enriched_contexts e USING (batch_id) JOIN risk_assessments r USING (batch_id)"
        " ORDER BY r.camera_id, c.batch_id"
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
