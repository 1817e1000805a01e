"""The `visits` and `visit_batches` tables (migration 44): batches linked into visits (core/visits/linking.py).

Linking is keyed by batch: a batch already linked returns its visit and writes nothing (a retry, a re-judgement or a
daemon restart mid-visit links nothing twice). The candidates are the visits whose span comes within the gap of the
batch's: a range read on `visits` alone, never on `detections`, so its cost does not grow with the detections
stored. A visit's level is its own verdict: `record_visit_level` only ever raises it.

An evidence-only alert links as the sighting `evidence:<alert key>` (`link_batch` like a batch); the batch that later
holds its detections names it in `replaces` and takes its place in the same visit (the alert's link row stays: the
alert names its visit).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

import duckdb

from hsi_dagster.core.visits.linking import Visit, VisitRules, link_choice
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
        [sighting.start - rules.widest_reach, sighting.end + rules.widest_reach, MAX_CANDIDATES],
    ).fetchall()
    return [_visit(row) for row in rows]


def _visits_of(conn: duckdb.DuckDBPyConnection, batch_ids: Collection[str]) -> list[Visit]:
    if not batch_ids:
        return []
    rows = conn.execute(
        f"SELECT {_VISIT_COLUMNS} FROM visits WHERE visit_id IN"
        " (SELECT visit_id FROM visit_batches WHERE batch_id IN (SELECT unnest(?::VARCHAR[])))",
        [list(batch_ids)],
    ).fetchall()
    return [_visit(row) for row in rows]


def link_batch(
    conn: duckdb.DuckDBPyConnection,
    sighting: Sighting,
    rules: VisitRules,
    now: datetime,
    *,
    replaces: Collection[str] = (),
) -> tuple[Visit, bool, str]:
    """Link the batch's sighting into its visit, in one transaction: (the visit, whether this call linked it, why).
    `replaces`: the evidence-only alerts' sightings (`evidence:<key>`) on the batch's detections: the batch joins
    their visit and takes their place."""
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
        candidates = candidate_visits(conn, sighting, rules)
        known = {c.visit_id for c in candidates}
        candidates += [v for v in _visits_of(conn, replaces) if v.visit_id not in known]
        visit, choice = link_choice(sighting, candidates, rules, replaces=replaces)
        why = choice.why
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
            "INSERT INTO visit_batches (batch_id, visit_id, camera_id, why, link, linked_at) VALUES (?, ?, ?, ?, ?, ?)",
            [sighting.batch_id, visit.visit_id, sighting.camera_id, why, choice.reason or "first", now],
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


def visit_links(conn: duckdb.DuckDBPyConnection, visit_id: str) -> list[tuple[str, str, str]]:
    """(batch or `evidence:<key>`, camera, the link's short reason) of the visit, in the order they were linked."""
    rows = conn.execute(
        "SELECT batch_id, camera_id, coalesce(link, why) FROM visit_batches WHERE visit_id = ?"
        " ORDER BY linked_at, batch_id",
        [visit_id],
    ).fetchall()
    return [(str(b), str(c), str(r)) for b, c, r in rows]


def visit_alerts(conn: duckdb.DuckDBPyConnection, visit_id: str) -> list[tuple[str, str]]:
    """(alert id, level) of the alerts the visit already raised, oldest first: its evidence-only alerts (linked as
    `evidence:<key>`) and its batches' risk alerts."""
    rows = conn.execute(
        "SELECT 'evidence:' || a.alert_key, a.risk_level, a.created_at FROM evidence_alerts a"
        " JOIN visit_batches vb ON vb.batch_id = 'evidence:' || a.alert_key WHERE vb.visit_id = $visit"
        " UNION ALL SELECT al.alert_id, al.risk_level, al.created_at FROM alerts al"
        " JOIN visit_batches vb ON vb.batch_id = al.batch_id WHERE vb.visit_id = $visit AND al.kind = 'risk'"
        " ORDER BY 3, 1",
        {"visit": visit_id},
    ).fetchall()
    return [(str(alert_id), str(level)) for alert_id, level, _ in rows]


def evidence_alerts_of_visit(conn: duckdb.DuckDBPyConnection, visit_id: str) -> list[tuple[str, str]]:
    """(alert id, level) of the visit's evidence-only alerts."""
    return [(alert_id, level) for alert_id, level in visit_alerts(conn, visit_id) if alert_id.startswith("evidence:")]


def visits_sharing_names(
    conn: duckdb.DuckDBPyConnection, visit: Visit, names: Sequence[str], window: timedelta, limit: int = 20
) -> list[Visit]:
    """The site's visits that began within `window` before this one and share one of `names` (plates as
    "plate:X", re-identified names; the `identities` column), oldest first, at most `limit`: the evidence of
    "third night this week". A range read on `visits` (not `detections`), bounded in time and number."""
    if not names:
        return []
    ids = conn.execute(  # the narrow columns first: reading a week of `sightings` JSON cost 20 ms, the ids 1 ms
        "SELECT visit_id FROM visits WHERE visit_id <> ? AND first_ts >= ? AND first_ts < ? AND len(identities) > 0"
        " AND list_has_any(identities, ?::VARCHAR[]) ORDER BY first_ts LIMIT ?",
        [visit.visit_id, visit.first_ts - window, visit.first_ts, list(names), limit],
    ).fetchall()
    if not ids:
        return []
    rows = conn.execute(
        f"SELECT {_VISIT_COLUMNS} FROM visits WHERE visit_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY first_ts",
        [[row[0] for row in ids]],
    ).fetchall()
    return [_visit(row) for row in rows]


def prune_visits(
    conn: duckdb.DuckDBPyConnection, pruned_batch_ids: Collection[str], evidence_before: datetime
) -> tuple[int, int]:
    """Retention, with the batches' (jobs.py `prune_visits`), in one transaction: the links of `pruned_batch_ids`
    go; an evidence-only alert's link linked before `evidence_before` goes once its visit holds no batch link any
    more; a visit left with no link goes. A batch kept past retention (corrected by the household) keeps its link,
    and its visit stays whole. Returns (links deleted, visits deleted)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        links = conn.execute(
            "DELETE FROM visit_batches WHERE batch_id IN (SELECT unnest(?::VARCHAR[])) RETURNING 1",
            [sorted(pruned_batch_ids)],
        ).fetchall()
        evidence = conn.execute(
            "DELETE FROM visit_batches e WHERE e.batch_id LIKE 'evidence:%' AND e.linked_at < ? AND NOT EXISTS"
            " (SELECT 1 FROM visit_batches b WHERE b.visit_id = e.visit_id AND b.batch_id NOT LIKE 'evidence:%')"
            " RETURNING 1",
            [evidence_before],
        ).fetchall()
        visits = conn.execute(
            "DELETE FROM visits v WHERE NOT EXISTS (SELECT 1 FROM visit_batches b WHERE b.visit_id = v.visit_id)"
            " RETURNING 1"
        ).fetchall()
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    return len(links) + len(evidence), len(visits)
