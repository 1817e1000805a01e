"""Linking a batch into its visit at 1M stored detections (issue 44 goal: <= 50 ms per batch), with the visits of the
30 days before already stored.

The database holds `--detections` detections (default 1M) over 30 days on 8 cameras, each in a recorded batch (one
per camera-minute), as bench/history_bench.py builds them, and one stored visit per 5 minutes of the site (its
batches as sightings, up to 40: VISIT_MAX_BATCHES) except for `--batches` batches with a person, sampled from the
last day, which are then linked one after another in time order on one connection:
  sighting  steps.sighting_for: the batch's sighting from its enriched context (built before, untimed)
  link      storage.evidence_alerts.alerts_for_batch (the evidence-only alerts it replaces) +
            storage.visits.link_batch: the candidate visits (a range read on `visits`, within the neighbour reach:
            the 8 cameras in a ring of neighbours), the choice, the writes
  level     storage.visits.visits_before (the night's earlier visits) + storage.visits.visits_sharing_names (the
            week's visits sharing a plate: one plate asked for every batch, the read repeat nights makes) +
            steps.visit_level_for (the facts and rules of the visit and of those) + storage.visits.record_visit_level
  floor     storage.visits.visit_of_batch + steps.floor_with_visit (what risk_assessments adds to the floor)
  total     the four together
and then each is linked a second time (a retry: nothing written). The night hours are set to 00-23 so that every
batch takes the worst path (the night's earlier visits read, the visit rules fire, the level written).

    flock /tmp/hsi-heavy.lock .venv/bin/python bench/visit_bench.py [--detections 1000000] [--batches 200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hsi_dagster.core.context.enrichment import build_context  # noqa: E402
from hsi_dagster.core.verdict.evidence import Floor  # noqa: E402
from hsi_dagster.core.verdict.visit_rules import EARLIER_WINDOW, NIGHTS_WINDOW  # noqa: E402
from hsi_dagster.core.visits.adjacency import Adjacency  # noqa: E402
from hsi_dagster.core.visits.linking import EVIDENCE_PREFIX, VisitRules  # noqa: E402
from hsi_dagster.settings import load_settings  # noqa: E402
from hsi_dagster.steps import floor_with_visit, sighting_for, visit_level_for  # noqa: E402
from hsi_dagster.storage.batches import load_batch  # noqa: E402
from hsi_dagster.storage.db import connect  # noqa: E402
from hsi_dagster.storage.evidence_alerts import alerts_for_batch  # noqa: E402
from hsi_dagster.storage.visits import (  # noqa: E402
    link_batch,
    record_visit_level,
    visit_of_batch,
    visits_before,
    visits_sharing_names,
)

CAMERAS = 8
DAYS = 30
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def build(db: Path, detections: int, sampled: int) -> list[str]:
    """The detections, batches and visits; returns the sampled batches (person, last day) left unlinked."""
    step_us = DAYS * 86_400_000_000 // detections
    with connect(db) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute(
            """INSERT INTO detections
                 (detection_id, camera_id, ts, label, confidence, source, line_no, ingested_at, batch_id)
               SELECT 'd' || i, 'cam' || (hash(i) % $cameras), ts,
                      CASE WHEN hour(ts) BETWEEN 7 AND 21 AND hash(i) % 3 = 0 THEN 'person'
                           WHEN hash(i) % 5 = 1 THEN 'cat' ELSE 'car' END,
                      0.5 + (hash(i) % 50) / 100.0, 'bench', i, ts + INTERVAL 1 SECOND,
                      'cam' || (hash(i) % $cameras) || '-' || CAST(floor(epoch(ts) / 60) AS BIGINT)
               FROM (SELECT i, $t0 + to_microseconds(i * $step) AS ts FROM range($n) r(i))""",
            {"cameras": CAMERAS, "t0": T0, "step": step_us, "n": detections},
        )
        conn.execute(
            """INSERT INTO detection_batches
               SELECT batch_id, any_value(camera_id), min(ts), max(ts), max(ts) + INTERVAL 30 SECOND, 'idle',
                      count(*), list(detection_id ORDER BY ts), list(DISTINCT label), false, now()
               FROM detections GROUP BY batch_id"""
        )
        last_day = T0 + timedelta(days=DAYS - 1)
        people = [
            row[0]
            for row in conn.execute(
                "SELECT batch_id FROM detection_batches WHERE started_at >= ? AND list_contains(labels, 'person')"
                " ORDER BY batch_id",
                [last_day],
            ).fetchall()
        ]
        chosen = random.Random(7).sample(people, min(sampled, len(people)))
        conn.execute("CREATE TEMP TABLE sampled AS SELECT unnest($ids) AS batch_id", {"ids": chosen})
        iso = "'%Y-%m-%dT%H:%M:%S.%f+00:00'"
        conn.execute(
            f"""INSERT INTO visits (visit_id, first_ts, last_ts, cameras, batch_count, identities, is_unknown,
                                    sightings, updated_at)
               SELECT 'visit:' || min(batch_id), min(started_at), max(last_ts), list(DISTINCT camera_id),
                      count(*), [], true,
                      to_json(list({{'batch_id': batch_id, 'camera_id': camera_id,
                                     'start': strftime(started_at, {iso}), 'end': strftime(last_ts, {iso}),
                                     'local_time': strftime(started_at, '%H:%M'), 'local_hour': hour(started_at),
                                     'timezone': 'UTC', 'unknown_people': 1, 'known_people': 0, 'vehicles': 0}}
                                   ORDER BY started_at)[1:40]),
                      now()
               FROM detection_batches WHERE batch_id NOT IN (SELECT batch_id FROM sampled)
               GROUP BY CAST(floor(epoch(started_at) / 300) AS BIGINT)"""
        )
        conn.execute(
            """INSERT INTO visit_batches (batch_id, visit_id, camera_id, why, linked_at)
               SELECT b.batch_id, 'visit:' || min(b.batch_id) OVER (PARTITION BY floor(epoch(b.started_at) / 300)),
                      b.camera_id, 'bench', now()
               FROM detection_batches b WHERE b.batch_id NOT IN (SELECT batch_id FROM sampled)"""
        )
        started = {
            row[0]: row[1]
            for row in conn.execute(
                "SELECT batch_id, started_at FROM detection_batches WHERE batch_id IN (SELECT batch_id FROM sampled)"
            ).fetchall()
        }
    return sorted(chosen, key=lambda batch_id: started[batch_id])


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   max {ms[-1]:7.2f} ms"


def per_batch(db: Path, batch_ids: list[str]) -> dict[str, list[float]]:
    # every hour a night hour: each batch takes the worst path (the night's earlier visits read, the rules fire)
    settings = load_settings(os.devnull, EVIDENCE_NIGHT_START_HOUR="0", EVIDENCE_NIGHT_END_HOUR="23")
    ring = {f"cam{i}": [f"cam{(i - 1) % CAMERAS}"] for i in range(CAMERAS)}
    rules = VisitRules.from_settings(settings, adjacency=Adjacency.of(ring))
    timings: dict[str, list[float]] = {"sighting": [], "link": [], "level": [], "floor": [], "total": [], "retry": []}
    with connect(db) as conn:
        contexts = []
        for batch_id in batch_ids:
            batch, detections = load_batch(conn, batch_id)
            contexts.append(build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2))
        for context in contexts:
            t = time.perf_counter()
            sighting = sighting_for(context, None, settings)
            t_sighting = time.perf_counter()
            if sighting is None:
                continue
            replaces = [EVIDENCE_PREFIX + a["alert_key"] for a in alerts_for_batch(conn, context.batch.batch_id)]
            visit, _, _ = link_batch(conn, sighting, rules, datetime.now(UTC), replaces=replaces)
            t_link = time.perf_counter()
            others = visits_sharing_names(conn, visit, ["plate:AB12CDE"], NIGHTS_WINDOW)
            level = visit_level_for(visit, settings, visits_before(conn, visit, EARLIER_WINDOW), other_nights=others)
            record_visit_level(conn, visit.visit_id, level.score, level.level, level.reasons, datetime.now(UTC))
            t_level = time.perf_counter()
            floor_with_visit(Floor(0, "low", (), ()), visit_of_batch(conn, context.batch.batch_id))
            t_floor = time.perf_counter()
            for key, value in zip(
                timings,
                (t_sighting - t, t_link - t_sighting, t_level - t_link, t_floor - t_level, t_floor - t),
                strict=False,
            ):
                timings[key].append(value)
        for context in contexts:
            sighting = sighting_for(context, None, settings)
            if sighting is None:
                continue
            t = time.perf_counter()
            _, linked, _ = link_batch(conn, sighting, rules, datetime.now(UTC))
            timings["retry"].append(time.perf_counter() - t)
            assert not linked, f"batch {context.batch.batch_id} linked twice"
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--detections", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "visits.duckdb"
        t = time.perf_counter()
        sampled = build(db, args.detections, args.batches)
        t_build = time.perf_counter() - t
        with connect(db, read_only=True) as conn:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM detections), (SELECT count(*) FROM detection_batches),"
                " (SELECT count(*) FROM visits), (SELECT count(*) FROM visit_batches)"
            ).fetchone()
        assert counts is not None
        print(
            f"{counts[0]:,} detections, {counts[1]:,} batches, {counts[2]:,} stored visits "
            f"({counts[3]:,} batches linked; built in {t_build:.1f} s)"
        )
        timings = per_batch(db, sampled)
        print(f"\nper batch, {len(timings['total'])} batches with a person of the last day, in time order:")
        for key, values in timings.items():
            print(f"  {key:8} {stats(values)}")
        with connect(db, read_only=True) as conn:
            joined = conn.execute(
                "SELECT count(*) FILTER (WHERE why NOT LIKE 'new visit%'), count(*) FROM visit_batches"
                " WHERE why <> 'bench'"
            ).fetchone()
        assert joined is not None
        print(f"linked: {joined[0]} joined a stored visit, {joined[1] - joined[0]} started one")


if __name__ == "__main__":
    main()
