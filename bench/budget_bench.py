"""Budgeting cost: fit_to_budget vs a naive re-encode-per-step loop vs one plain tiktoken encode of the prompt.

Run:  .venv/bin/python bench/budget_bench.py [--runs 51] [--detections 110] [--seed 1]

The prompt (~10k cl100k tokens: a busy 90-s batch at quality "full") needs truncation: budget A makes half of
the removable sections go (5 steps); budget B needs every removal and then shortening of florence + detections.
"fit_to_budget (cold)" uses a fresh TokenCounter per run (it encodes the static
system prompt too); "warm" reuses one whose only cached count is the static prompt (the steady state: the static
part is identical for every batch). The naive approach renders and re-encodes the whole prompt after each removal.
Target: fit_to_budget / one-encode <= 1.3x.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hsi_dagster.core.context.enrichment import build_context  # noqa: E402
from hsi_dagster.core.prompt.budget import FULL_REMOVAL_ORDER, fit_to_budget  # noqa: E402
from hsi_dagster.core.prompt.messages import STATIC_SYSTEM_PROMPT, build_sections, render_messages  # noqa: E402
from hsi_dagster.core.prompt.tokens import TokenCounter, load_encoding  # noqa: E402
from hsi_dagster.settings import EXAMPLE_CAMERAS_PATH, load_camera_profiles  # noqa: E402
from hsi_dagster.synthetic.batches import synthetic_batch  # noqa: E402


def naive_fit(sections, profile_text, budget, counter: TokenCounter):
    """The approach to avoid: re-render and re-encode the whole prompt after every removal step."""
    kept, removed = list(sections), []
    messages = render_messages(kept, profile_text)
    tokens = counter.count_messages(messages)
    for key in FULL_REMOVAL_ORDER:
        if tokens <= budget:
            break
        if any(s.key == key for s in kept):
            kept = [s for s in kept if s.key != key]
            removed.append(key)
            messages = render_messages(kept, profile_text, removed=removed)
            tokens = counter.count_messages(messages)
    return messages, tokens, removed


def median_times(fns: dict, runs: int) -> dict[str, float]:
    """Median seconds per function; the functions take turns in every round, so load drifts hit all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=51)
    parser.add_argument("--detections", type=int, default=110)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    profile = load_camera_profiles(EXAMPLE_CAMERAS_PATH)["driveway"]
    profile_text = profile.to_prompt_text()
    batch, detections = synthetic_batch(
        random.Random(args.seed),
        camera_id="driveway",
        n_detections=args.detections,
        track_labels=("person", "car", "dog", "person", "bicycle"),
    )
    context = build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2, camera_profile=profile)
    sections = build_sections(context)
    messages = render_messages(sections, profile_text)
    full_text = messages[0]["content"] + messages[1]["content"]
    encoding = load_encoding()
    prompt_tokens = TokenCounter().count_messages(messages)
    # Budget A forces half of the removable sections out but no shortening (so the naive loop is comparable);
    # budget B needs every removal AND shortening of florence + detections (fit_to_budget only).
    half = FULL_REMOVAL_ORDER[: len(FULL_REMOVAL_ORDER) // 2]
    budget = TokenCounter().count_messages(
        render_messages([s for s in sections if s.key not in half], profile_text, removed=list(half))
    )
    floor = TokenCounter().count_messages(
        render_messages(
            [s for s in sections if s.key in ("detections", "florence")], profile_text, removed=list(FULL_REMOVAL_ORDER)
        )
    )
    budget_b = floor - 1500

    check = fit_to_budget(sections, profile_text, budget, TokenCounter(), batch_id=batch["batch_id"])
    naive_messages, naive_tokens, naive_removed = naive_fit(sections, profile_text, budget, TokenCounter())
    assert check.messages == naive_messages and check.tokens_after == naive_tokens, "both approaches must agree"
    check_b = fit_to_budget(sections, profile_text, budget_b, TokenCounter(), batch_id=batch["batch_id"])

    warm = TokenCounter()
    warm.count_static(STATIC_SYSTEM_PROMPT)

    def fit_warm():
        warm.clear()  # keep only the pinned static count: nothing of this batch is cached
        fit_to_budget(sections, profile_text, budget, warm)

    medians = median_times(
        {
            "one": lambda: encoding.encode_ordinary(full_text),
            "cold": lambda: fit_to_budget(sections, profile_text, budget, TokenCounter()),
            "hot": fit_warm,
            "naive": lambda: naive_fit(sections, profile_text, budget, TokenCounter()),
            "cold_b": lambda: fit_to_budget(sections, profile_text, budget_b, TokenCounter()),
        },
        args.runs,
    )
    one, cold, hot, naive, cold_b = (medians[k] for k in ("one", "cold", "hot", "naive", "cold_b"))

    print(
        f"prompt: {prompt_tokens} tokens (cl100k, incl. message overhead), {len(full_text)} chars, "
        f"{len(detections)} detections, {len(sections)} sections"
    )
    print(
        f"budget A: {budget} -> removed {check.sections_removed} ({len(check.sections_removed)} steps), "
        f"{check.tokens_after} tokens after, utilization {check.utilization:.2f}"
    )
    print(
        f"budget B: {budget_b} -> removed all {len(check_b.sections_removed)} removable sections, shortened "
        f"{check_b.sections_shortened}, {check_b.tokens_after} tokens after"
    )
    print(f"median of {args.runs} runs (budget A unless noted):")
    print(f"  one tiktoken encode of the prompt : {one * 1e3:8.3f} ms  (1.00x)")
    print(f"  fit_to_budget, cold counter       : {cold * 1e3:8.3f} ms  ({cold / one:.2f}x one-encode)")
    print(f"  fit_to_budget, static cached      : {hot * 1e3:8.3f} ms  ({hot / one:.2f}x one-encode)")
    print(f"  naive re-encode after each step   : {naive * 1e3:8.3f} ms  ({naive / one:.2f}x one-encode)")
    print(f"  fit_to_budget, budget B, cold     : {cold_b * 1e3:8.3f} ms  ({cold_b / one:.2f}x one-encode)")
    print(
        f"ratio fit_to_budget / one-encode = {cold / one:.2f} (target <= 1.3); naive / one-encode = {naive / one:.2f}"
    )


if __name__ == "__main__":
    main()
