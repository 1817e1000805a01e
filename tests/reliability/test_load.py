"""Load, CI-sized (#15 item 8; the long run is bench/load_bench.py): 16 cameras at 10 x the normal rate.

10 s of a seeded 16-camera stream (10 x 8 scenario events per camera and hour = 1,280 events an hour, ~12-14
detections a second by day), played in real time as one inbox file a second with a few invalid lines mixed in,
each file ingested as it lands (the library call of `hsi ingest` and the ingest asset), then every window
recorded as a batch (the `detection_batches` step's storage call), then a few batches, fast path and regular,
through the whole pipeline on the real embedded llama.cpp server. Asserts: ingest keeps up with the stream, the
memory of the process stays bounded, every detection is in exactly one batch or in quarantine (lost 0,
duplicates 0), and each assessed batch has one row and one successful run.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME
from hsi_dagster.storage.batches import pending_closed_batches, record_batch
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_files
from hsi_dagster.synthetic.bad_lines import bad_lines
from tests.reliability.stream_ledger import (
    cameras,
    ledger,
    per_second,
    stream_records,
    successful_runs_per_partition,
    write_file,
)
from tests.support.pipeline_helpers import resources

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(300)]
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
SEED = 15
CAMERAS = cameras(16)
FACTOR = 10
SECONDS = 10
# Midday: the busiest mix of the simulator (deliveries, residents: many confident persons, each a fast-path batch).
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BAD_EVERY = 3  # one invalid line in every third file
RSS_GROWTH_BOUND_MIB = 160  # ingest + batching of the stream in this process (DuckDB's buffers included)


def _peak_since_reset() -> tuple[int, int]:
    """(current RSS, peak RSS since the last reset) in KiB, from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def test_16_cameras_at_10x_nothing_lost_or_duplicated_memory_bounded(llama_server, tmp_path: Path) -> None:
    db, inbox = tmp_path / "hsi.duckdb", tmp_path / "inbox"
    inbox.mkdir()
    records = stream_records(SEED, CAMERAS, FACTOR, START, SECONDS)
    chunks = per_second(records, START, SECONDS)
    faults = iter(bad_lines(SEED, SECONDS))
    assert len({r["camera_id"] for r in records}) >= 8, "the stream should reach at least half the 16 cameras"

    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM) to the current RSS
    rss_before, _ = _peak_since_reset()
    t0 = time.monotonic()
    ingest_busy, lags, bad_in = 0.0, [], 0
    for second, chunk in enumerate(chunks):
        time.sleep(max(0.0, t0 + second + 1 - time.monotonic()))  # the file of second k lands at k + 1
        lines: list = list(chunk)
        if second % BAD_EVERY == 0:
            lines.insert(len(lines) // 2, next(faults).line)
            bad_in += 1
        path = write_file(inbox, f"live-{second:04d}.jsonl", lines)
        began = time.monotonic()
        report = ingest_files(db, [path])
        ingest_busy += time.monotonic() - began
        lags.append(time.monotonic() - (t0 + second + 1))
        assert report.loaded + report.quarantined == len(lines), report.summary()
    stream_s = time.monotonic() - t0
    assert ingest_busy < SECONDS / 2, f"ingest took {ingest_busy:.1f}s for {SECONDS}s of stream: it does not keep up"

    rules = BatchRules()  # the defaults: 90 s windows, 30 s idle, fast path for persons >= 0.90
    as_of = START + timedelta(seconds=SECONDS + rules.idle_timeout_seconds + 1)  # every window closed
    with connect(db) as conn:
        closed = pending_closed_batches(conn, rules, as_of)
        for batch in closed:
            record_batch(conn, batch.batch_id, rules, as_of)
        assert pending_closed_batches(conn, rules, as_of) == []
    rss_after, peak = _peak_since_reset()
    growth_mib = (peak - rss_before) / 1024
    print(
        f"\n{len(records)} detections ({len(records) / SECONDS:.1f}/s) + {bad_in} bad lines from "
        f"{len({r['camera_id'] for r in records})} cameras in {stream_s:.1f}s; ingest busy {ingest_busy:.2f}s, "
        f"lag max {max(lags):.2f}s; {len(closed)} batches; RSS {rss_before // 1024} -> peak {peak // 1024} MiB"
    )
    assert growth_mib < RSS_GROWTH_BOUND_MIB, f"RSS grew by {growth_mib:.0f} MiB"

    ids = [r["detection_id"] for r in records]
    after_batching = ledger(db, ids, bad_in)
    print("after batching:", after_batching.row())
    assert after_batching.lost == [] and after_batching.duplicates == 0, after_batching
    assert after_batching.quarantined_bad == bad_in and after_batching.quarantined_valid == 0
    assert after_batching.batched == len(ids) and after_batching.waiting == 0
    assert after_batching.batches == len(closed) > SECONDS  # 16 cameras at 10x: more than a batch a second

    # A few batches through the whole pipeline: the smallest regular one and two fast-path ones (small prompts:
    # SmolLM2 on 2 shared cores).
    regular = min((b for b in closed if b.close_reason != "fast_path"), key=lambda b: b.detection_count)
    fast = [b for b in closed if b.close_reason == "fast_path"][:2]
    chosen = [regular.batch_id, *(b.batch_id for b in fast)]
    res = resources(str(db), llama_server.url)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, chosen)
        for batch_id in chosen:
            result = dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res)
            assert result.success, batch_id
        runs = successful_runs_per_partition(instance, None)  # dg.materialize's job
    final = ledger(db, ids, bad_in, runs)
    print("after assessing:", final.row(), final.statuses)
    assert final.assessments == len(chosen) and set(final.unassessed) == {b.batch_id for b in closed} - set(chosen)
    assert {k: runs[k] for k in chosen} == dict.fromkeys(chosen, 1)
    assert final.lost == [] and final.duplicates == 0
    assert set(final.statuses) <= {"ok", "invalid_output"}, final.statuses
