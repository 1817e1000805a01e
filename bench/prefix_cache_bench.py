"""Prompt-prefix cache on vs off on the embedded llama.cpp server, with real budgeted prompts.

Run:  .venv/bin/python bench/prefix_cache_bench.py [--prompts 8] [--runs 3]

Every budgeted prompt starts with the same byte-identical static part (system prompt, instructions, schema,
examples). With `cache_prompt` on, llama-server evaluates only what follows the longest common prefix with what the
slot last held; off, it evaluates every token. Same prompts, one slot, sequential requests, max_tokens=1 so the
figures are about prompt processing. Reports prompt tokens evaluated (timings.prompt_n) and wall time, medians of
--runs rounds (on and off alternate), and the ratios off / on.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from hsi_dagster.core.context.enrichment import build_context  # noqa: E402
from hsi_dagster.core.prompt.budget import fit_to_budget  # noqa: E402
from hsi_dagster.core.prompt.messages import build_sections  # noqa: E402
from hsi_dagster.core.prompt.tokens import TokenCounter  # noqa: E402
from hsi_dagster.synthetic.batches import synthetic_batch  # noqa: E402


def one_round(url: str, prompts: list[list[dict]], cache: bool) -> tuple[int, float]:
    evaluated = 0
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as http:
        for messages in prompts:
            reply = http.post(
                "/v1/chat/completions",
                json={"messages": messages, "max_tokens": 1, "cache_prompt": cache, "temperature": 0},
            ).json()
            evaluated += reply["timings"]["prompt_n"]
    return evaluated, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.update({"HSI_ENV_FILE": os.devnull, "CTX_SIZE": "8192", "PARALLEL": "1", "THREADS": "2"})
    from hsi_dagster.llm.embedded import EmbeddedServerProcess

    rng = random.Random(5)
    counter = TokenCounter()
    prompts = []
    for _ in range(args.prompts):
        batch, detections = synthetic_batch(rng, n_detections=rng.choice([2, 4, 8]))
        context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2)
        prompts.append(fit_to_budget(build_sections(context), "", 5000, counter).messages)
    server = EmbeddedServerProcess(port=None).start()
    try:
        results = {True: [], False: []}
        for _ in range(args.runs):
            for cache in (False, True):
                results[cache].append(one_round(server.url, prompts, cache))
    finally:
        server.stop()
    on_tokens = statistics.median(r[0] for r in results[True])
    off_tokens = statistics.median(r[0] for r in results[False])
    on_s = statistics.median(r[1] for r in results[True])
    off_s = statistics.median(r[1] for r in results[False])
    print(f"{args.prompts} prompts, 1 slot, medians of {args.runs} rounds")
    print(f"cache on : {on_tokens:.0f} prompt tokens evaluated, {on_s:.1f}s")
    print(f"cache off: {off_tokens:.0f} prompt tokens evaluated, {off_s:.1f}s")
    print(f"off / on: {off_tokens / on_tokens:.2f}x tokens, {off_s / on_s:.2f}x time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
