"""Ingest throughput: 1M simulated detections from one JSONL file into a fresh DuckDB file (target 100k/s).

The input (simulator output, ~35 % of records with enrichment, plus 0.1 % bad lines of every kind) is generated
once and cached under the temp dir, keyed by the simulator's source, so reruns time ingestion only.

    .venv/bin/python bench/ingest_bench.py [--detections 1000000] [--runs 3] [--gzip]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hsi_dagster.storage.ingest import ingest_files  # noqa: E402
from hsi_dagster.synthetic import bad_lines as bad_source  # noqa: E402
from hsi_dagster.synthetic import streams as sim  # noqa: E402
from hsi_dagster.synthetic.jsonl import write_jsonl  # noqa: E402

TARGET_PER_S = 100_000
BAD_FRACTION = 0.001


def build_input(detections: int, gz: bool, seed: int = 7) -> Path:
    """The benchmark file, generated once per (size, simulator version)."""
    sources = b"".join(Path(module.__file__ or "").read_bytes() for module in (sim, bad_source))
    version = hashlib.sha256(sources).hexdigest()[:10]
    cache = Path(tempfile.gettempdir()) / "hsi-bench"
    path = cache / f"ingest-{detections}-{seed}-{version}.jsonl{'.gz' if gz else ''}"
    if path.exists():
        return path
    for stale in cache.glob(f"ingest-{detections}-{seed}-*"):  # inputs of older simulator versions
        stale.unlink()
    started = time.perf_counter()
    start = datetime(2026, 12, 1, tzinfo=UTC)
    good = itertools.islice(sim.simulate(seed, start=start, duration_s=30 * 86400, events_per_hour=60), detections)
    bad = iter(bad_source.bad_lines(seed, int(detections * BAD_FRACTION)))
    every = int(1 / BAD_FRACTION)

    def lines():
        for i, record in enumerate(good, start=1):
            yield record
            if i % every == 0:
                item = next(bad, None)
                if item is not None:
                    yield item.line

    count = write_jsonl(path, lines())
    print(
        f"generated {count} lines ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f}s: {path}"
    )
    return path


def _cpu_seconds() -> float:
    """CPU time of this process (all threads): comparable across runs even when the machine is busy."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detections", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gzip", action="store_true", help="read a .jsonl.gz file instead")
    args = parser.parse_args()
    path = build_input(args.detections, args.gzip)
    rates, reingest = [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.duckdb"
            cpu = _cpu_seconds()
            report = ingest_files(db, [path])
            cpu = _cpu_seconds() - cpu
            rate = report.loaded / report.elapsed_s
            rates.append(rate)
            again = ingest_files(db, [path])
            reingest.append(again.elapsed_s)
            print(
                f"run {run + 1}: {report.loaded} loaded, {report.quarantined} quarantined, "
                f"{report.files[0].rescued} via the "
                f"Python validator, {report.elapsed_s:.2f}s (CPU {cpu:.1f}s, load average {os.getloadavg()[0]:.1f}) -> "
                f"{rate:,.0f} detections/s; re-ingest (all duplicates) {again.elapsed_s:.2f}s, {again.loaded} loaded"
            )
    median = statistics.median(rates)
    print(
        f"ingest_bench: {args.detections} detections{' (gzip)' if args.gzip else ''}, median of {args.runs} runs: "
        f"{median:,.0f} detections/s = {median / TARGET_PER_S:.2f}x the {TARGET_PER_S:,}/s target; "
        f"re-ingest {statistics.median(reingest):.2f}s"
    )


if __name__ == "__main__":
    main()
