"""Pipeline throughput vs the raw server, and orchestration overhead per batch, on the embedded llama.cpp server.

Run:  .venv/bin/python bench/pipeline_bench.py [--batches 12] [--runs 3] [--max-tokens 384] [--minutes 15]

Side by side, same server, same concurrency (PARALLEL), same prompts, same max_tokens and seed:
- pipeline: `hsi process` (runner.process: PARALLEL worker processes, Dagster runs on a persistent instance,
  pools, DuckDB writes) over N recorded batches whose assessments were deleted, so every stage runs again;
- raw: the exact `budgeted_prompts.messages` of those batches sent straight to /v1/chat/completions from PARALLEL
  threads with plain httpx.
Throughput = assessments per minute; the ratio pipeline / raw is the figure (target >= 0.9). The runs alternate
(raw, pipeline, raw, ...) and the median of --runs is reported. The pipeline also repairs outputs that do not
parse (one more request), which the raw round does not: the LLM time of both is reported.
Orchestration overhead per batch = run wall time
minus the LLM time of its calls (from latency_ms), median over batches, for `hsi process` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from hsi_dagster.core.prompt.risk_schema import RISK_JSON_SCHEMA  # noqa: E402


def raw_round(url: str, prompts: list[list[dict]], parallel: int, max_tokens: int) -> tuple[float, float]:
    """Wall seconds to send every prompt once with `parallel` threads, no orchestration at all, and the summed
    seconds of the requests (LLM time)."""
    body = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "risk", "schema": RISK_JSON_SCHEMA, "strict": True},
        },
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 42,
        "cache_prompt": True,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    with httpx.Client(base_url=url, timeout=600) as http:

        def one(messages: list[dict]) -> float:
            sent = time.perf_counter()
            http.post("/v1/chat/completions", json={**body, "messages": messages}).raise_for_status()
            return time.perf_counter() - sent

        started = time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            llm_s = sum(pool.map(one, prompts))
        return time.perf_counter() - started, llm_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=15.0, help="simulated activity to draw batches from")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hsi-bench-"))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    db = str(work / "bench.duckdb")
    os.environ.update(
        {
            "HSI_ENV_FILE": os.devnull,
            "DAGSTER_HOME": str(home),
            "HSI_DUCKDB_PATH": db,
            "CTX_SIZE": str(4096 * args.parallel),
            "PARALLEL": str(args.parallel),
            "THREADS": "2",
            "NEMOTRON_MAX_OUTPUT_TOKENS": str(args.max_tokens),
            "PROMPT_SAFETY_MARGIN_TOKENS": "256",
        }
    )
    from hsi_dagster.cli.process import process
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.llm.embedded import EmbeddedServerProcess
    from hsi_dagster.settings import load_settings
    from hsi_dagster.storage.batches import pending_closed_batches, record_batch
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.ingest import ingest_lines
    from hsi_dagster.synthetic.streams import simulate

    server = EmbeddedServerProcess(port=None, log_path=str(work / "llama.log")).start()
    os.environ["LLAMA_SERVER_URL"] = server.url
    settings = load_settings()
    try:
        start = datetime.now(UTC) - timedelta(hours=3)
        records = [json.dumps(r) for r in simulate(11, start=start, duration_s=args.minutes * 60, events_per_hour=30)]
        ingest_lines(db, records)
        # Only the first --batches closed windows are processed (warm-up included): the rest are marked excluded.
        with connect(db, read_only=True) as conn:
            closed = pending_closed_batches(conn, BatchRules.from_settings(settings), datetime.now(UTC))
        ids = [b.batch_id for b in closed][: args.batches]
        with connect(db) as conn:
            for batch in closed[args.batches :]:
                record_batch(conn, batch.batch_id, BatchRules.from_settings(settings), datetime.now(UTC))
            conn.execute(
                "INSERT INTO risk_assessments (batch_id, camera_id, status, assessed_at) "
                "SELECT batch_id, camera_id, 'excluded', now() FROM detection_batches "
                "WHERE batch_id NOT IN (SELECT unnest(?::VARCHAR[]))",
                [ids],
            )
        first = process(settings, datetime.now(UTC))
        assert sorted(first.batch_ids) == sorted(ids) and not first.failed, (first.batch_ids, first.failed)
        with connect(db, read_only=True) as conn:
            prompts = [
                json.loads(m)
                for (m,) in conn.execute(
                    "SELECT messages FROM budgeted_prompts"
                    " WHERE batch_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY batch_id",
                    [ids],
                ).fetchall()
            ]
        raw_rates, pipe_rates, overheads, work = [], [], [], []
        for run in range(args.runs):
            raw_s, raw_llm_s = raw_round(server.url, prompts, args.parallel, args.max_tokens)
            raw_rates.append(len(prompts) / raw_s * 60)
            with connect(db) as conn:
                conn.execute("DELETE FROM risk_assessments WHERE batch_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
            report = process(settings, datetime.now(UTC))
            assert len(report.runs) == len(ids) and not report.failed, report.failed
            pipe_rates.append(len(ids) / report.seconds * 60)
            with connect(db, read_only=True) as conn:
                llm = dict(
                    conn.execute(
                        "SELECT batch_id, latency_ms FROM risk_assessments WHERE batch_id IN "
                        "(SELECT unnest(?::VARCHAR[]))",
                        [ids],
                    ).fetchall()
                )
            overheads += [r.seconds - llm[r.batch_id] / 1000 for r in report.runs]
            work.append(sum(llm.values()) / 1000 / raw_llm_s)
            print(
                f"run {run + 1}: raw {raw_rates[-1]:.2f}/min, pipeline {pipe_rates[-1]:.2f}/min "
                f"({report.seconds:.1f}s incl. worker start-up); LLM time pipeline/raw {work[-1]:.2f}",
                flush=True,
            )
    finally:
        server.stop()
    raw, pipe = statistics.median(raw_rates), statistics.median(pipe_rates)
    print(f"batches={len(ids)} parallel={args.parallel} max_tokens={args.max_tokens} runs={args.runs}")
    print(
        f"raw server: {raw:.2f} assessments/min; pipeline (hsi process): {pipe:.2f} assessments/min; "
        f"ratio {pipe / raw:.2f} (target >= 0.9)"
    )
    # The pipeline's LLM time includes its repair calls (one more request for an output that does not parse, e.g.
    # cut off at max_tokens), which the raw round never makes; output lengths also differ a little between rounds.
    print(f"LLM time pipeline/raw (repair calls included): {', '.join(f'{w:.2f}' for w in work)}")
    print(
        f"orchestration overhead per batch (run wall time - LLM time), hsi process: median "
        f"{statistics.median(overheads):.2f}s, p90 {sorted(overheads)[int(0.9 * (len(overheads) - 1))]:.2f}s"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
