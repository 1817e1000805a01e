"""Measured model trust (table `model_trust`, migration 11) and the trust that applied to recent verdicts.

`hsi eval` and the `evaluation` asset save one row per model fingerprint (core/verdict/trust.py): the recommended
trust and the sweep behind it. Production reads the row of the answering model's fingerprint; a row for the same
model name, schema and quality level but another size is returned too, so the caller can refuse it by name rather
than silently find nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb

from hsi_dagster.core.evaluation.trust_sweep import TrustPoint
from hsi_dagster.core.verdict.trust import ModelFingerprint, TrustRecord
from hsi_dagster.storage.schema import has_table
from hsi_dagster.storage.shipped_trust import shipped_trust_record


def _fingerprint_values(fingerprint: ModelFingerprint) -> list[object]:
    """The fingerprint, model, model_size, schema and quality_level columns of a trust row."""
    return [fingerprint.key, fingerprint.model, fingerprint.size, fingerprint.schema, fingerprint.quality_level]


def _sweep(points: Sequence[TrustPoint]) -> str:
    return json.dumps([point.as_row() for point in points])


def save_trust(
    conn: duckdb.DuckDBPyConnection,
    fingerprint: ModelFingerprint,
    trust: int,
    points: Sequence[TrustPoint],
    *,
    goal: float,
    split: str,
    configuration: str,
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO model_trust (fingerprint, model, model_size, schema, quality_level, trust,"
        " false_alarm_goal, split, configuration, sweep, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [*_fingerprint_values(fingerprint), trust, goal, split, configuration, _sweep(points), datetime.now(UTC)],
    )


def save_household_trust(
    conn: duckdb.DuckDBPyConnection,
    fingerprint: ModelFingerprint,
    trust: int,
    points: Sequence[TrustPoint],
    *,
    batches: int,
    goal: float,
) -> None:
    """The trust measured on the household's corrected batches (migration 3802), one row per fingerprint."""
    conn.execute(
        "INSERT OR REPLACE INTO household_trust (fingerprint, model, model_size, schema, quality_level, trust, batches,"
        " false_alarm_goal, sweep, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [*_fingerprint_values(fingerprint), trust, batches, goal, _sweep(points), datetime.now(UTC)],
    )


def trust_record_for(conn: duckdb.DuckDBPyConnection, fingerprint: ModelFingerprint) -> TrustRecord | None:
    """The household's own measurement of exactly this fingerprint (its corrected batches); else the labeled set's
    record of exactly this fingerprint, or the newest for the same model name, schema and quality level (another
    size: the caller refuses it, naming both); with none stored, the project's shipped measurement of the bundled
    model (storage/shipped_trust.py); None when nothing was measured for the model."""
    for record in (_household_record(conn, fingerprint), _stored_record(conn, fingerprint)):
        if record is not None:
            return record
    return shipped_trust_record(fingerprint)


def _household_record(conn: duckdb.DuckDBPyConnection, fingerprint: ModelFingerprint) -> TrustRecord | None:
    if not has_table(conn, "household_trust"):
        return None
    row = conn.execute("SELECT trust, batches FROM household_trust WHERE fingerprint = ?", [fingerprint.key]).fetchone()
    if row is None:
        return None
    origin = f"the household's {row[1]} corrected batches"
    return TrustRecord(fingerprint.key, int(row[0]), "household.with-floor", origin)


def _stored_record(conn: duckdb.DuckDBPyConnection, fingerprint: ModelFingerprint) -> TrustRecord | None:
    if not has_table(conn, "model_trust"):
        return None
    row = conn.execute(
        "SELECT fingerprint, trust, configuration FROM model_trust"
        " WHERE model = ? AND schema = ? AND quality_level = ?"
        " ORDER BY fingerprint = ? DESC, measured_at DESC LIMIT 1",
        [fingerprint.model, fingerprint.schema, fingerprint.quality_level, fingerprint.key],
    ).fetchone()
    return None if row is None else TrustRecord(row[0], int(row[1]), row[2])


def measured_trust(conn: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every stored measurement, the household's own first (production reads those first), then newest first (for
    `hsi config check` and reports)."""
    if not has_table(conn, "model_trust"):
        return []
    columns = "fingerprint, model, model_size, schema, quality_level, trust, false_alarm_goal"
    household = ""
    if has_table(conn, "household_trust"):
        household = (
            f"SELECT {columns}, 'household' AS split, 'household.with-floor' AS configuration, sweep, measured_at,"
            " 0 AS rank FROM household_trust UNION ALL "
        )
    cursor = conn.execute(
        f"SELECT * EXCLUDE (rank) FROM ({household}SELECT {columns}, split, configuration, sweep, measured_at,"
        " 1 AS rank FROM model_trust) ORDER BY rank, measured_at DESC"
    )
    names = [d[0] for d in cursor.description]
    rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    for row in rows:
        row["sweep"] = json.loads(row["sweep"]) if isinstance(row["sweep"], str) else row["sweep"]
    return rows


def recent_trust(conn: duckdb.DuckDBPyConnection, limit: int = 200) -> list[dict[str, Any]]:
    """The trust that applied to the latest `limit` verdicts, per (model, trust, source, reason): how many, the
    newest time; empty before migration 11's columns exist."""
    columns = {
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'risk_assessments'"
            " AND table_schema = current_schema()"
        ).fetchall()
    }
    if "trust_source" not in columns:
        return []
    cursor = conn.execute(
        """WITH recent AS (
               SELECT model, model_trust, trust_source, trust_reason, assessed_at FROM risk_assessments
               WHERE trust_source IS NOT NULL ORDER BY assessed_at DESC LIMIT ?)
           SELECT model, model_trust, trust_source, trust_reason, count(*) AS verdicts, max(assessed_at) AS last_at
           FROM recent GROUP BY ALL ORDER BY last_at DESC""",
        [limit],
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
