"""Rows of the pipeline stages after batching (contexts, prompts, assessments).

One row per batch, replaced on re-run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb


def _now() -> datetime:
    return datetime.now(UTC)


def _replace(conn: duckdb.DuckDBPyConnection, table: str, row: dict[str, Any]) -> None:
    """INSERT OR REPLACE keyed by the table's primary key (batch_id): re-running a step never duplicates.

    Every column of the table is written (those not in `row` get their default): DuckDB's INSERT OR REPLACE only
    updates the columns it names, so a re-run must not leave e.g. the `error` of an earlier failed attempt behind.
    """
    table_columns = [
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = ? AND table_schema = current_schema()"
            " ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]
    unknown = set(row) - set(table_columns)
    if unknown:
        raise ValueError(f"{table} has no column(s) {', '.join(sorted(unknown))}")
    columns = ", ".join(table_columns)
    marks = ", ".join("?" if name in row else "DEFAULT" for name in table_columns)
    values = [row[name] for name in table_columns if name in row]
    conn.execute(f"INSERT OR REPLACE INTO {table} ({columns}) VALUES ({marks})", values)


def save_context(conn, batch_id: str, context_json: str, quality_level: str, missing: list[str]) -> None:
    _replace(
        conn,
        "enriched_contexts",
        {
            "batch_id": batch_id,
            "context": context_json,
            "quality_level": quality_level,
            "missing_enrichment": list(missing),
            "created_at": _now(),
        },
    )


def load_context_json(conn, batch_id: str) -> str:
    row = conn.execute("SELECT context FROM enriched_contexts WHERE batch_id = ?", [batch_id]).fetchone()
    if row is None:
        raise LookupError(f"no enriched context for batch {batch_id}: materialize enriched_contexts first")
    return row[0]


def save_prompt(
    conn,
    batch_id: str,
    *,
    messages: list[dict],
    tokens_estimate: int,
    tokens_before: int,
    budget: int,
    budget_source: str,
    utilization: float,
    sections_removed: list[str],
    static_prefix_sha256: str,
    prompt_degraded: list[str] | None = None,
) -> None:
    _replace(
        conn,
        "budgeted_prompts",
        {
            "batch_id": batch_id,
            "messages": json.dumps(messages, ensure_ascii=False),
            "prompt_tokens_estimate": tokens_estimate,
            "tokens_before": tokens_before,
            "context_budget": budget,
            "budget_source": budget_source,
            "context_utilization": utilization,
            "sections_removed": list(sections_removed),
            "static_prefix_sha256": static_prefix_sha256,
            "prompt_degraded": list(prompt_degraded or []),
            "created_at": _now(),
        },
    )


def load_prompt(conn, batch_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT messages, prompt_tokens_estimate, context_budget, budget_source, context_utilization, sections_removed"
        " FROM budgeted_prompts WHERE batch_id = ?",
        [batch_id],
    ).fetchone()
    if row is None:
        raise LookupError(f"no budgeted prompt for batch {batch_id}: materialize budgeted_prompts first")
    return {
        "messages": json.loads(row[0]),
        "prompt_tokens_estimate": row[1],
        "context_budget": row[2],
        "budget_source": row[3],
        "context_utilization": row[4],
        "sections_removed": list(row[5] or []),
    }


def save_assessment(conn, row: dict[str, Any]) -> None:
    row = dict(row)
    row.setdefault("assessed_at", _now())
    for column in ("assessment", "floor_reasons", "floor_ignored"):  # JSON columns
        if isinstance(row.get(column), (dict, list, tuple)):
            row[column] = json.dumps(row[column], ensure_ascii=False)
    _replace(conn, "risk_assessments", row)


def load_assessment(conn, batch_id: str) -> dict[str, Any] | None:
    """The stored risk_assessments row of a batch, every column as read back (JSON columns still text), or None."""
    cursor = conn.execute("SELECT * FROM risk_assessments WHERE batch_id = ?", [batch_id])
    row = cursor.fetchone()
    return None if row is None else dict(zip([d[0] for d in cursor.description], row, strict=False))


def count_assessments(conn, batch_id: str) -> int:
    return conn.execute("SELECT count(*) FROM risk_assessments WHERE batch_id = ?", [batch_id]).fetchone()[0]


def unassessed_batches(conn) -> dict[str, float]:
    """Recorded batches with no stored assessment (any status) -> epoch seconds when recorded; and batches whose
    re-judgement was asked (`batch_rejudgements`: a late Frigate description joined them) after their stored context
    or assessment was made -> epoch seconds when asked."""
    rows = conn.execute(
        """SELECT b.batch_id, epoch(b.recorded_at) AS since FROM detection_batches b
               ANTI JOIN risk_assessments r ON r.batch_id = b.batch_id
           UNION ALL
           SELECT j.batch_id, epoch(j.requested_at) AS since FROM batch_rejudgements j
               JOIN risk_assessments r ON r.batch_id = j.batch_id
               LEFT JOIN enriched_contexts c ON c.batch_id = j.batch_id
           WHERE j.requested_at > r.assessed_at OR j.requested_at > coalesce(c.created_at, r.assessed_at)
           ORDER BY since, batch_id"""
    ).fetchall()
    return {batch_id: float(recorded) for batch_id, recorded in rows}
