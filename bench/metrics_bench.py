"""What one Prometheus scrape of `hsi metrics serve` costs as the tables grow (the exporter reads DuckDB each time).

The database holds N recorded batches (50 cameras), each with a budgeted prompt and an assessment (statuses,
levels, removed sections and models spread like the pipeline's), plus a small backlog of unassessed batches.
Timed: whole scrapes through prometheus_client (`generate_latest` on the exporter's registry: open a read-only
connection, every query, the exposition text), one after another; the median and the worst are reported.

    .venv/bin/python bench/metrics_bench.py [--batches 100000] [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import generate_latest  # noqa: E402

from hsi_dagster.cli.metrics import duckdb_registry  # noqa: E402
from hsi_dagster.storage.db import connect  # noqa: E402

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def fill(path: Path, batches: int) -> None:
    """Bulk rows with SQL (a bench may; the package keeps its SQL in storage/)."""
    with connect(path) as conn:
        conn.execute(
            """INSERT INTO detection_batches SELECT 'b' || i, 'cam' || (i % 50),
                 TIMESTAMPTZ '2026-11-01' + to_seconds(i * 20), TIMESTAMPTZ '2026-11-01' + to_seconds(i * 20 + 5),
                 TIMESTAMPTZ '2026-11-01' + to_seconds(i * 20 + 35),
                 CASE WHEN i % 10 = 0 THEN 'fast_path' WHEN i % 7 = 0 THEN 'window' ELSE 'idle' END,
                 2, ['d' || i], ['car'], false, now() FROM range(?) t(i)""",
            [batches],
        )
        conn.execute(
            """INSERT INTO budgeted_prompts (batch_id, messages, prompt_tokens_estimate, tokens_before, context_budget,
                 budget_source, context_utilization, sections_removed, created_at)
               SELECT 'b' || i, '[]', 2000 + i % 9000, 2000 + i % 9000, 14592, 'settings', (2000 + i % 9000) / 14592,
                 CASE i % 3 WHEN 0 THEN ['depth', 'pose'] WHEN 1 THEN ['depth'] ELSE [] END, now()
               FROM range(?) t(i)""",
            [batches],
        )
        conn.execute(
            """INSERT INTO risk_assessments (batch_id, camera_id, risk_score, risk_level, status, model, prompt_tokens,
                 completion_tokens, cached_tokens, context_budget, context_utilization, latency_ms, assessed_at)
               SELECT 'b' || i, 'cam' || (i % 50), i % 101,
                 CASE WHEN i % 101 < 30 THEN 'low' WHEN i % 101 < 60 THEN 'medium' WHEN i % 101 < 85 THEN 'high'
                      ELSE 'critical' END,
                 CASE WHEN i % 97 = 0 THEN 'invalid_output' ELSE 'ok' END,
                 CASE WHEN i % 2 = 0 THEN 'Nemotron-3-Nano-30B-A3B-Q4_K_M'
                      ELSE '/models/Nemotron-3-Nano-30B-A3B-Q4_K_M.gguf' END,
                 2000 + i % 9000, 80 + i % 300, (2000 + i % 9000) / 2, 14592, (2000 + i % 9000) / 14592,
                 500 + (i % 60000), TIMESTAMPTZ '2026-11-01' + to_seconds(i * 20 + 60)
               FROM range(?) t(i) WHERE i % 500 <> 499""",  # one batch in 500 waits for its assessment
            [batches],
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hsi.duckdb"
        fill(path, args.batches)
        registry = duckdb_registry(str(path), clock=lambda: NOW)
        timings = []
        for _ in range(args.runs):
            started = time.perf_counter()
            text = generate_latest(registry)
            timings.append(time.perf_counter() - started)
        series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"{args.batches} batches, {series} series: scrape median {statistics.median(timings) * 1000:.0f} ms, "
        f"max {max(timings) * 1000:.0f} ms over {args.runs} scrapes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
