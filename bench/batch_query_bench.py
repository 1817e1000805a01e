"""A `batch_window_sensor` tick with 10k pending batches (target <= 1 s), and the query at its heart.

The database holds 1M detections already assigned to recorded batches plus 10k closed, unrecorded batches
(50 cameras x 200 batches x 5 detections, one detection in 10 on the person fast path). Timed: the read-only
`pending_closed_batches` query alone, and whole sensor ticks evaluated by Dagster (`evaluate_tick` on a real
temporary instance, its dynamic partitions applied as the daemon would), one after another with the cursor,
each requesting the next SENSOR_MAX_BATCHES_PER_TICK batches.

    .venv/bin/python bench/batch_query_bench.py [--batches 10000] [--history 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from hsi_dagster.core.intake.batching import BatchRules  # noqa: E402
from hsi_dagster.storage.batches import pending_closed_batches  # noqa: E402
from hsi_dagster.storage.db import connect  # noqa: E402

TARGET_S = 1.0
CAMERAS = 50
PER_BATCH = 5
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def build(db: Path, batches: int, history: int) -> None:
    per_camera = batches // CAMERAS
    with connect(db) as conn:
        conn.execute(
            """INSERT INTO detections
                 (detection_id, camera_id, ts, label, confidence, source, line_no, ingested_at, batch_id)
               SELECT 'old-' || i, 'cam' || (i % $cameras), $t0 - to_seconds(1 + i), 'car', 0.5, 'bench', i,
                      now(), 'old-batch'
               FROM range($history) r(i)""",
            {"cameras": CAMERAS, "t0": T0, "history": history},
        )
        # batch b of camera c starts at b*60 s; its detections are 5 s apart, so the 40 s gap closes it by idle
        conn.execute(
            """INSERT INTO detections (detection_id, camera_id, ts, label, confidence, source, line_no, ingested_at)
               SELECT 'p-' || c || '-' || b || '-' || k, 'cam' || c, $t0 + to_seconds(b * 60 + k * 5),
                      CASE WHEN k = 2 AND b % 2 = 0 THEN 'person' ELSE 'car' END,
                      CASE WHEN k = 2 AND b % 2 = 0 THEN 0.95 ELSE 0.6 END, 'bench', 0, now()
               FROM range($cameras) a(c), range($per_camera) bb(b), range($per_batch) kk(k)""",
            {"cameras": CAMERAS, "t0": T0, "per_camera": per_camera, "per_batch": PER_BATCH},
        )


def tick_times(db: Path, ticks: int) -> tuple[list[float], int]:
    """Wall time of consecutive sensor ticks (evaluation + applying its partition requests); runs requested."""
    from hsi_dagster import definitions
    from hsi_dagster.resources import HsiDuckDBResource
    from hsi_dagster.sensors import batch_window_sensor
    from hsi_dagster.settings import load_settings

    res = {**definitions.build_resources(load_settings()), "duckdb": HsiDuckDBResource(database=str(db))}
    defs = dg.Definitions(
        assets=definitions.defs.assets, jobs=definitions.defs.jobs, sensors=definitions.defs.sensors, resources=res
    )
    times, requested, cursor = [], 0, None
    with dg.instance_for_test() as instance:
        for _ in range(ticks):
            started = time.perf_counter()
            with dg.build_sensor_context(
                instance_ref=instance.get_ref(), cursor=cursor, resources=res, definitions=defs
            ) as context:
                result = batch_window_sensor.evaluate_tick(context)
            for request in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            times.append(time.perf_counter() - started)
            requested += len(result.run_requests or [])
            cursor = result.cursor
    return times, requested


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batches", type=int, default=10_000, help="regular batches pending (fast-path ones come on top)"
    )
    parser.add_argument("--history", type=int, default=1_000_000, help="detections already in recorded batches")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ticks", type=int, default=5, help="consecutive sensor ticks to time")
    args = parser.parse_args()
    rules = BatchRules()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        build(db, args.batches, args.history)
        as_of = T0 + timedelta(seconds=(args.batches // CAMERAS) * 60 + 3600)
        times = []
        with connect(db, read_only=True) as conn:
            for _ in range(args.runs):
                started = time.perf_counter()
                pending = pending_closed_batches(conn, rules, as_of)
                times.append(time.perf_counter() - started)
        fast = sum(1 for b in pending if b.close_reason == "fast_path")
        ticks, requested = tick_times(db, args.ticks)
    median = statistics.median(times)
    print(f"runs: {', '.join(f'{t:.3f}s' for t in times)}")
    print(
        f"batch_query_bench: pending_closed_batches over {len(pending)} pending batches "
        f"({len(pending) - fast} regular + {fast} "
        f"fast-path, {args.history:,} detections already recorded), median of {args.runs}: {median:.3f}s "
        f"(target <= {TARGET_S:.1f}s: {'met' if median <= TARGET_S else 'NOT met'})"
    )
    tick = statistics.median(ticks)
    print(
        f"batch_query_bench: batch_window_sensor tick, {len(ticks)} consecutive ticks "
        f"({', '.join(f'{t:.2f}s' for t in ticks)}; "
        f"{requested} runs requested): median {tick:.3f}s, max {max(ticks):.3f}s "
        f"(target <= {TARGET_S:.1f}s: {'met' if max(ticks) <= TARGET_S else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
