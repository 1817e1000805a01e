"""History per batch at 1M stored detections (issue 25 goal: baseline + cross-camera <= 50 ms), side by side with the
batch's other pipeline steps, and what the aggregate costs at ingest and in the daily asset.

The database holds `--detections` detections (default 1M) over 30 days on 8 cameras (about one every 2.6 s, labels
by hour of day), each in a recorded batch (one per camera-minute) with a stored verdict, and the camera_activity
aggregate derived from them (`reconcile_activity`, what the daily camera_baselines asset runs). For `--batches`
recorded batches of the last day, timed one after another on one connection:
  load      storage.batches.load_batch (the batch's row and detections)
  history   assets.baselines.batch_history: the baseline, cross-camera and clock queries + core.context.history rules
  context   core.context.enrichment.build_context (full quality)
  prompt    core.prompt.messages.build_sections + core.prompt.budget.fit_to_budget
Then ingest of `--ingest-lines` new lines with the aggregate maintained vs. with its two calls stubbed out
(alternating, `--runs` each), and the daily reconcile and prune.

    flock /tmp/hsi-heavy.lock .venv/bin/python bench/history_bench.py [--detections 1000000] [--batches 200]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hsi_dagster.assets.baselines import batch_history  # noqa: E402
from hsi_dagster.core.context.camera_profiles import parse_camera_profiles  # noqa: E402
from hsi_dagster.core.context.enrichment import build_context  # noqa: E402
from hsi_dagster.core.context.history import HistoryRules  # noqa: E402
from hsi_dagster.core.prompt.budget import fit_to_budget  # noqa: E402
from hsi_dagster.core.prompt.messages import build_sections  # noqa: E402
from hsi_dagster.core.prompt.tokens import TokenCounter, preload_tokenizer  # noqa: E402
from hsi_dagster.storage import ingest  # noqa: E402
from hsi_dagster.storage.batches import load_batch  # noqa: E402
from hsi_dagster.storage.db import connect  # noqa: E402
from hsi_dagster.storage.history import prune_activity, reconcile_activity  # noqa: E402

CAMERAS = 8
DAYS = 30
T0 = datetime(2026, 11, 1, tzinfo=UTC)
PROFILES = """cameras:
  cam0: {timezone: Europe/Paris, approached_from: [cam1]}
  cam1: {timezone: Europe/Paris, approached_from: [cam2]}
  cam2: {timezone: Europe/Paris, entry_point: true}
"""


def build(db: Path, detections: int) -> None:
    step_us = DAYS * 86_400_000_000 // detections
    with connect(db) as conn:
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
        conn.execute(
            """INSERT INTO risk_assessments (batch_id, camera_id, risk_score, risk_level, status, assessed_at)
               SELECT batch_id, camera_id, 10, CASE WHEN hash(batch_id) % 20 = 0 THEN 'high' ELSE 'low' END, 'ok',
                      now()
               FROM detection_batches"""
        )


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return f"median {statistics.median(ms):8.2f} ms   p95 {p95:8.2f} ms   max {ms[-1]:8.2f} ms"


def per_batch(db: Path, batches: int) -> dict[str, list[float]]:
    profiles = parse_camera_profiles(PROFILES, source="bench")
    rules = HistoryRules()
    counter = TokenCounter()
    preload_tokenizer()
    timings: dict[str, list[float]] = {"load": [], "history": [], "context": [], "prompt": []}
    with connect(db, read_only=True) as conn:
        last_day = T0 + timedelta(days=DAYS - 1)
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT batch_id FROM detection_batches WHERE started_at >= ? ORDER BY batch_id", [last_day]
            ).fetchall()
        ]
        for batch_id in random.Random(7).sample(ids, min(batches, len(ids))):
            t = time.perf_counter()
            batch, detections = load_batch(conn, batch_id)
            t_load = time.perf_counter()
            facts = batch_history(conn, batch, detections, profiles, rules)
            t_history = time.perf_counter()
            context = build_context(
                batch,
                detections,
                quality_level="full",
                clip_noise_threshold=0.2,
                history=facts,
                camera_profile=profiles.get(batch["camera_id"]),
            )
            t_context = time.perf_counter()
            fit_to_budget(build_sections(context), "", 6000, counter, batch_id=batch_id)
            t_prompt = time.perf_counter()
            for key, value in zip(
                timings, (t_load - t, t_history - t_load, t_context - t_history, t_prompt - t_context), strict=True
            ):
                timings[key].append(value)
    return timings


def ingest_side_by_side(db: Path, lines: int, runs: int) -> dict[str, list[float]]:
    """Ingest `lines` new detections with the aggregate maintained and with its calls stubbed out, alternating."""
    real = (ingest.record_activity, ingest.record_activity_rows)
    out: dict[str, list[float]] = {"with aggregate": [], "without (stubbed)": []}
    start = T0 + timedelta(days=DAYS)
    for run in range(runs):
        for mode in out:
            records = [
                json.dumps(
                    {
                        "detection_id": f"ing-{mode[:4]}-{run}-{i}",
                        "camera_id": f"cam{i % CAMERAS}",
                        "ts": (start + timedelta(seconds=i + run * lines)).isoformat().replace("+00:00", "Z"),
                        "label": "person" if i % 3 == 0 else "car",
                        "confidence": 0.8,
                    }
                )
                for i in range(lines)
            ]
            if mode.startswith("without"):
                ingest.record_activity = ingest.record_activity_rows = lambda *a, **k: None  # type: ignore[assignment]
            try:
                t = time.perf_counter()
                ingest.ingest_lines(db, records, source=f"bench-{mode}-{run}")
                out[mode].append(time.perf_counter() - t)
            finally:
                ingest.record_activity, ingest.record_activity_rows = real
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--detections", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--ingest-lines", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.duckdb"
        t = time.perf_counter()
        build(db, args.detections)
        with connect(db) as conn:
            t_build = time.perf_counter() - t
            t = time.perf_counter()
            reconciled = reconcile_activity(conn, T0 - timedelta(days=1))
            t_fill = time.perf_counter() - t
            buckets = conn.execute("SELECT count(*) FROM camera_activity").fetchone()
            batches = conn.execute("SELECT count(*) FROM detection_batches").fetchone()
        print(
            f"{args.detections:,} detections, {batches[0] if batches else 0:,} batches with verdicts, "
            f"{buckets[0] if buckets else 0:,} camera_activity buckets (filled in {t_fill:.2f} s; data built in "
            f"{t_build:.1f} s; {reconciled.buckets_corrected:,} buckets written)"
        )
        timings = per_batch(db, args.batches)
        print(f"\nper batch, {len(timings['load'])} recorded batches of the last day, one connection:")
        for key, values in timings.items():
            print(f"  {key:8} {stats(values)}")
        for mode, values in ingest_side_by_side(db, args.ingest_lines, args.runs).items():
            rate = args.ingest_lines / statistics.median(values)
            print(f"ingest {args.ingest_lines:,} lines {mode:18} {stats(values)}  ({rate:,.0f} lines/s)")
        with connect(db) as conn:
            since = T0 + timedelta(days=DAYS - 16)
            t = time.perf_counter()
            again = reconcile_activity(conn, since)
            t_reconcile = time.perf_counter() - t
            t = time.perf_counter()
            pruned = prune_activity(conn, since)
            t_prune = time.perf_counter() - t
        print(
            f"daily camera_baselines reconcile over 16 days: {t_reconcile * 1000:.0f} ms "
            f"({again.buckets_corrected} buckets corrected); retention prune: {t_prune * 1000:.0f} ms "
            f"({pruned:,} buckets dropped)"
        )


if __name__ == "__main__":
    main()
