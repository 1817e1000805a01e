"""What one completion of the test suite's llama.cpp server costs, alone and beside a busy process.

Run:  .venv/bin/python bench/suite_llm_bench.py [THREADS=1] [PRIO=0] [LOAD=1]

The suite's session server (tests/support/llm_fixtures.SERVER_SETTINGS: SmolLM2, CTX_SIZE 8192, 2 slots, 2 threads,
any KEY=VALUE given overrides it) gets the 8 budgeted prompts of `closed_windows(4 cameras, 2 windows)` (built by
the first three batch assets, no LLM), 2 at a time as the tests send them, with the plain output schema and 256
output tokens. LOAD=N starts N processes that spin on the CPU meanwhile (a Dagster daemon or run worker beside the
server). Prints the wall time, each completion's latency and generated tokens, and the median tokens per second.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support


def budgeted_prompts(db: str) -> list[list[dict]]:
    import dagster as dg

    from hsi_dagster.assets.batches import detection_batches
    from hsi_dagster.assets.contexts import enriched_contexts
    from hsi_dagster.assets.prompts import budgeted_prompts as prompts_asset
    from hsi_dagster.sensors import batch_window_sensor
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.ingest import ingest_lines
    from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick

    ingest_lines(db, closed_windows([f"cam{n}" for n in range(4)], 2, start=hours_ago(2)))
    res = resources(db)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        for request in tick.run_requests:
            assets = [detection_batches, enriched_contexts, prompts_asset]
            dg.materialize(assets, partition_key=request.partition_key, instance=instance, resources=res)
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT messages FROM budgeted_prompts ORDER BY batch_id").fetchall()
    return [json.loads(row[0]) for row in rows]


def spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> None:
    from hsi_dagster.core.prompt.risk_schema import PLAIN, assessment_schema
    from hsi_dagster.llm.client import LlamaClient
    from hsi_dagster.llm.embedded import EmbeddedServerProcess, free_port
    from tests.support.llm_fixtures import SERVER_SETTINGS

    overrides: dict[str, object] = dict(SERVER_SETTINGS)
    overrides.update(arg.split("=", 1) for arg in sys.argv[1:])
    load = int(str(overrides.pop("LOAD", 0)))
    work = Path(tempfile.mkdtemp(prefix="hsi-suite-llm-"))
    prompts = budgeted_prompts(str(work / "hsi.duckdb"))
    server = EmbeddedServerProcess(overrides, port=free_port(), log_path=work / "llama.log", env_file=os.devnull)
    server.start(wait=True)
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=spin, args=(stop,)) for _ in range(load)]
    for proc in spinners:
        proc.start()
    try:
        client = LlamaClient(server.url)
        client.ensure_ready()
        schema = assessment_schema(PLAIN)

        def complete(messages: list[dict]) -> tuple[float, int, float]:
            started = time.monotonic()
            result = client.chat_json(messages, schema, max_tokens=256)
            per_second = float(result.timings.get("predicted_per_second") or 0.0)
            return time.monotonic() - started, result.usage.completion_tokens, per_second

        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(complete, prompts))
        seconds = time.monotonic() - started
        print(
            f"{overrides} beside {load} busy process(es): {len(done)} completions in {seconds:.1f} s;"
            f" latency {[round(d[0], 1) for d in done]} s; generated {[d[1] for d in done]} tokens;"
            f" median {statistics.median(d[2] for d in done):.1f} tokens/s per slot"
        )
    finally:
        stop.set()
        for proc in spinners:
            proc.join()
        server.stop()


if __name__ == "__main__":
    main()
