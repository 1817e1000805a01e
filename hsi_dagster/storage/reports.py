"""The rows behind the readable risk report (`cli/report.py` formats them)."""

from __future__ import annotations

import json
from typing import NamedTuple

import duckdb

from hsi_dagster.storage.corrections import corrections_stored


class ReportRow(NamedTuple):
    """One batch of the report; the batch and assessment fields are None when not recorded or not assessed."""

    batch_id: str
    camera_id: str | None
    close_reason: str | None
    detection_count: int | None
    status: str | None
    risk_score: int | None
    risk_level: str | None
    summary: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    context_utilization: float | None
    latency_ms: float | None
    sections_removed: list[str] | None
    model_score: int | None = None  # the model's own verdict score (core/verdict/final.py)
    floor_score: int | None = None  # the evidence floor's
    floor_reasons: list[str] | None = None  # the rules that fired
    decided_by: str | None = None  # "model" or "floor"
    model_level: str | None = None  # the level of the model's own score (core/verdict/trust.py)
    model_trust: int | None = None  # the trust that applied
    trust_reason: str | None = None  # why that trust ("measured trust 0", "MODEL_TRUST=2", the default's reason)
    trust_source: str | None = None  # measured | setting | default
    corrected: str | None = None  # which way the household's latest correction went (lower, higher, confirmed)


def report_rows(conn: duckdb.DuckDBPyConnection, batch_ids: list[str]) -> list[ReportRow]:
    """Each of `batch_ids` with its batch and assessment, by camera and start time; read-only."""
    if not batch_ids:
        return []
    corrected = (
        "SELECT batch_id, arg_max(direction, received_at) AS corrected FROM corrections GROUP BY batch_id"
        if corrections_stored(conn)
        else "SELECT NULL::VARCHAR AS batch_id, NULL::VARCHAR AS corrected WHERE false"
    )
    rows = conn.execute(
        f"""WITH ids AS (SELECT unnest(?::VARCHAR[]) AS batch_id), corrected AS ({corrected})
           SELECT i.batch_id, b.camera_id, b.close_reason, b.detection_count, r.status, r.risk_score, r.risk_level,
                  r.summary, r.prompt_tokens, r.cached_tokens, r.context_utilization, r.latency_ms, r.sections_removed,
                  r.model_score, r.floor_score, r.floor_reasons, r.decided_by, r.model_level, r.model_trust,
                  r.trust_reason, r.trust_source, c.corrected
           FROM ids i LEFT JOIN detection_batches b USING (batch_id) LEFT JOIN risk_assessments r USING (batch_id)
               LEFT JOIN corrected c USING (batch_id)
           ORDER BY b.camera_id, b.started_at""",
        [batch_ids],
    ).fetchall()
    return [ReportRow._make((*row[:15], json.loads(row[15]) if row[15] else None, *row[16:])) for row in rows]
