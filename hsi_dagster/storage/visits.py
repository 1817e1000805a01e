"""The `visits` and `visit_batches` tables (migration 44): batches linked into visits (core/visits/linking.py).

Linking is keyed by batch: a batch already linked returns its visit and writes nothing (a retry, a re-judgement or a
daemon restart mid-visit links nothing twice). The candidates are the visits whose span comes within the gap of the
batch's: a range read on `visits` alone, never on `detections`, so its cost does not grow with the detections
stored. A visit's level is its own verdict: `record_visit_level` only ever raises it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

import duckdb

from hsi_dagster.core.visits.linking import Visit, VisitRules, link
from hsi_dagster.core.visits.sighting import Sighting, sightings_from_json, sightings_to_json

MAX_CANDIDATES = 50  # visits read per link: many overlapping visits (a street party) stay a bounded read

_VISIT_COLUMNS = "visit_id, sightings, risk_score, risk_level, reasons"


def _visit(row: Sequence) -> Visit:
    visit_id, sightings, score, level, reasons = row
    return Visit(visit_id, sightings_from_json(sightings), int(score), level, tuple(json.loads(reasons or "[]")))


def visit_of_batch(conn: duckdb.DuckDBPyConnection, batch_id: str) -> Visit | None:
    """The visit the batch is linked into, None when it is in none (no person or vehicle, or not linked yet)."""
    row = conn.execute(
        "SELECT v.visit_id, v.sightings, v.risk_score, v.risk_level, v.reasons"
        " FROM visit_batches b JOIN visits v ON v.visit_id = b.visit_id WHERE b.batch_id = ?",
        [batch_id],
    ).fetchone()
    return None if row is None else _visit(row)


def candidate_visits(conn: duckdb.DuckDBPyConnection, sighting: Sighting, rules: VisitRules) -> list[Visit]:
    """Visits whose span comes within the gap (and the clock skew) of the sighting's, the latest first."""
    rows = conn.execute(
        f"SELECT {_VISIT_COLUMNS} FROM visits WHERE last_ts >= ? AND first_ts <= ? ORDER BY last_ts DESC LIMIT ?",
        [sighting.start - rules.reach, sighting.end + rules.reach, MAX_CANDIDATES],
    ).fetchall()
    return [_visit(row) for row in rows]


def link_batch(
    conn: duckdb.DuckDBPyConnection, sighting: Sighting, rules: VisitRules, now: datetime
) -> tuple[Visit, bool, str]:
    """Link the batch's sighting into its visit, in one transaction: (the visit, whether this call linked it, why)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        linked = conn.execute(
            "SELECT visit_id, why FROM visit_batches WHERE batch_id = ?", [sighting.batch_id]
        ).fetchone()
        if linked is not None:
            conn.execute("COMMIT")
            visit = visit_of_batch(conn, sighting.batch_id)
            if visit is None:
                raise LookupError(f"batch {sighting.batch_id}: linked to {linked[0]}, which is not in `visits`")
            return visit, False, str(linked[1])
        visit, why = link(sighting, candidate_visits(conn, sighting, rules), rules)
        identities = sorted(visit.names)
        conn.execute(
            "INSERT INTO visits (visit_id, first_ts, last_ts, cameras, batch_count, identities, is_unknown, sightings,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (visit_id) DO UPDATE SET first_ts = excluded.first_ts, last_ts = excluded.last_ts,"
            " cameras = excluded.cameras, batch_count = excluded.batch_count, identities = excluded.identities,"
            " is_unknown = excluded.is_unknown, sightings = excluded.sightings, updated_at = excluded.updated_at",
            [
                visit.visit_id,
                visit.first_ts,
                visit.last_ts,
                list(visit.cameras),
                len(visit.sightings),
                identities,
                visit.unknown,
                sightings_to_json(visit.sightings),
                now,
            ],
        )
        conn.execute(
            "INSERT INTO visit_batches (batch_id, visit_id, camera_id, why, linked_at) VALUES (?, ?, ?, ?, ?)",
            [sighting.batch_id, visit.visit_id, sighting.camera_id, why, now],
        )
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    return visit, True, why


def record_visit_level(
    conn: duckdb.DuckDBPyConnection, visit_id: str, score: int, level: str, reasons: Sequence[str], now: datetime
) -> bool:
    """Store the visit's own level when it is higher than the stored one (never lowered); True when it was raised."""
    raised = conn.execute(
        "UPDATE visits SET risk_score = ?, risk_level = ?, reasons = ?, updated_at = ?"
        " WHERE visit_id = ? AND risk_score < ? RETURNING visit_id",
        [score, level, json.dumps(list(reasons), ensure_ascii=False), now, visit_id, score],
    ).fetchall()
    return bool(raised)


def visits_before(conn: duckdb.DuckDBPyConnection, visit: Visit, window: timedelta, limit: int = 5) -> list[Visit]:
    """The site's visits with a person not known that ended before this one began, within `window`, oldest first
    (at most `limit`): the evidence of "second visit tonight"."""
    rows = conn.execute(
        f"SELECT {_VISIT_COLUMNS} FROM visits WHERE is_unknown AND visit_id <> ? AND last_ts < ? AND last_ts >= ?"
        " ORDER BY first_ts LIMIT ?",
        [visit.visit_id, visit.first_ts, visit.first_ts - window, limit],
    ).fetchall()
    return [_visit(row) for row in rows]


def visit_batch_ids(conn: duckdb.DuckDBPyConnection, visit_id: str) -> list[str]:
    """The visit's batches in the order they were linked."""
    rows = conn.execute(
        "SELECT batch_id FROM visit_batches WHERE visit_id = ? ORDER BY linked_at, batch_id", [visit_id]
    ).fetchall()
    return [row[0] for row in rows]
