"""Household exceptions (core/verdict/exceptions.py) from the stored corrections and contexts; removals by hand
(table `exception_removals`, migration 38).

An exception is derived each time it is asked for (the floor asks once per batch, for the batch's camera:
`exceptions_in_force`), from the batches whose latest correction is `low` and their
stored contexts (kept past retention: storage/corrections.py), so it expires by itself and follows a household
that changes its mind; only a removal is stored.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
from pydantic import ValidationError

from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.verdict.evidence import EvidenceRules, unknown_person_at_entry_at_night
from hsi_dagster.core.verdict.exceptions import (
    ExceptionPolicy,
    HarmlessLabel,
    HouseholdException,
    Ineligible,
    derive_exceptions,
    harmless_label,
)
from hsi_dagster.storage.corrections import corrections_stored


def harmless_labels(
    conn: duckdb.DuckDBPyConnection,
    rules: EvidenceRules,
    *,
    camera_id: str | None = None,
    received_by: datetime | None = None,
) -> tuple[list[HarmlessLabel], list[str]]:
    """Each batch whose latest correction (received by `received_by`, when given) is `low` and that has a stored
    context, as a label (of `camera_id` only, when given); and one line per batch whose context could not be read
    (skipped, never an exception)."""
    if not corrections_stored(conn):
        return [], []
    rows = conn.execute(
        "SELECT c.batch_id, e.context, c.received_at FROM ("
        "  SELECT batch_id, arg_max(level, received_at) AS level, max(received_at) AS received_at"
        "  FROM corrections WHERE ($camera IS NULL OR camera_id = $camera) AND ($by IS NULL OR received_at <= $by)"
        "  GROUP BY batch_id"
        ") c JOIN enriched_contexts e USING (batch_id) WHERE c.level = 'low' ORDER BY c.received_at",
        {"camera": camera_id, "by": received_by},
    ).fetchall()
    labels, skipped = [], []
    for batch_id, context_json, received_at in rows:
        try:
            context = EnrichedContext.from_json(context_json)
        except ValidationError as exc:
            skipped.append(f"{batch_id}: stored context unreadable ({exc.error_count()} errors); not counted")
            continue
        flag = unknown_person_at_entry_at_night(context, None, rules)
        labels.append(harmless_label(batch_id, context, received_at, flag))
    return labels, skipped


def removals(conn: duckdb.DuckDBPyConnection) -> dict[str, datetime]:
    if not corrections_stored(conn):
        return {}
    return dict(conn.execute("SELECT pattern_key, removed_at FROM exception_removals").fetchall())


def household_exceptions(
    conn: duckdb.DuckDBPyConnection,
    rules: EvidenceRules,
    policy: ExceptionPolicy,
    now: datetime,
    camera_id: str | None = None,
) -> tuple[list[HouseholdException], list[Ineligible], list[str]]:
    """The exceptions in force at `now` (from the corrections received by then; of `camera_id` only, when given),
    the patterns the rules refuse, and the batches skipped."""
    labels, skipped = harmless_labels(conn, rules, camera_id=camera_id, received_by=now)
    exceptions, refused = derive_exceptions(labels, removals(conn), now, policy)
    return exceptions, refused, skipped


def exceptions_in_force(
    conn: duckdb.DuckDBPyConnection, camera_id: str, rules: EvidenceRules, policy: ExceptionPolicy, now: datetime
) -> list[HouseholdException]:
    """What the evidence floor of a batch of `camera_id` judged at `now` respects (plain data for core)."""
    return household_exceptions(conn, rules, policy, now, camera_id)[0]


def remove_exception(conn: duckdb.DuckDBPyConnection, pattern_key: str, now: datetime) -> None:
    """From now on only corrections received later count for this pattern."""
    conn.execute(
        "INSERT INTO exception_removals (pattern_key, removed_at) VALUES (?, ?)"
        " ON CONFLICT (pattern_key) DO UPDATE SET removed_at = excluded.removed_at",
        [pattern_key, now],
    )
