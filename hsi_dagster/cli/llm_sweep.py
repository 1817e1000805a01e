"""`hsi llm sweep`: llama-server configurations side by side on the project's own prompts, and what to switch to.

Reads hsi.env like production (the baseline), takes candidates (`--try NAME=v1,v2`, one setting changed at a time,
or `--candidates FILE.toml`, or external servers with `--endpoint URL`), and for each one starts the embedded
llama.cpp server as `hsi llm serve` would (hsi_dagster/llm/sweep.py), sends the labeled scenarios' prompts through
production's enrichment, budget and call-and-repair code (`evaluation.engine.evaluate_configuration`) at the
pipeline's concurrency (the candidate's slots), and stops the server. A candidate that cannot run (an unknown
setting, a refused value, a server that does not start) is reported as failed with the reason; the sweep goes on.

Per candidate: the server's build, model, slots and context (/props), the production flags, the model file's
SHA-256, peak memory (VmHWM), prompt and generation tokens/s (per request, from llama-server's timings), verdict
latency p50/p95, verdicts per minute in aggregate, cached prompt tokens, the schema-valid rate, and the quality of
the stored verdicts (level accuracy, under-calls, false alarms). Output: a markdown table and JSON (and a PNG),
the baseline first, each candidate as a ratio to it, and a one-line recommendation.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from hsi_dagster.cli.sweep_report import (
    Call,
    CandidateRun,
    cell,
    chart_png,
    figures_of,
    markdown,
    recommend,
    statuses_line,
    with_ratios,
)

if TYPE_CHECKING:  # the parser is built for every `hsi` command: Dagster and the client load when the sweep runs
    from hsi_dagster.llm.protocol import ChatOptions, ChatResult
    from hsi_dagster.resources.llm import LlamaServerResource

DEFAULT_OUT = "data/llm-sweep"
DEFAULT_SCENARIOS = 12


def recording_llm(resource: LlamaServerResource, url: str) -> tuple[LlamaServerResource, list[Call]]:
    """A copy of the `llm` resource for `url` that records each completion's span and result (the sweep's
    figures), and the list it records into."""
    from hsi_dagster.resources.llm import LlamaServerResource

    calls: list[Call] = []

    class RecordingLlm(LlamaServerResource):
        def chat_json(
            self, messages: list[dict], schema: dict, *, max_tokens: int | None = None, **options: Unpack[ChatOptions]
        ) -> ChatResult:
            started = time.monotonic()
            result = super().chat_json(messages, schema, max_tokens=max_tokens, **options)
            calls.append((started, time.monotonic(), result))
            return result

    values = {name: getattr(resource, name) for name in type(resource).model_fields}
    return RecordingLlm(**{**values, "urls": [url]}), calls


def add_sweep_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a setting of hsi.env and values to try, one candidate per value (repeat for more settings)",
    )
    parser.add_argument(
        "--candidates", metavar="FILE", help="a TOML file of [[candidate]] tables (settings, optional name)"
    )
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="URL",
        help="measure running servers instead (the first is the baseline); nothing is started",
    )
    parser.add_argument("--env-file", default=None, help="settings file (default: HSI_ENV_FILE or hsi.env)")
    parser.add_argument(
        "--scenarios",
        type=int,
        default=DEFAULT_SCENARIOS,
        metavar="N",
        help=f"labeled scenarios per candidate, round-robin over categories (default {DEFAULT_SCENARIOS})",
    )
    parser.add_argument("--split", choices=["tune", "holdout"], help="only scenarios of this split")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument(
        "--startup-timeout", type=float, default=None, help="seconds a server may take to start (LLM_STARTUP_...)"
    )
    return parser


# ----------------------------------------------------------------------------------------------- the command
def run_sweep(args: argparse.Namespace) -> int:
    """0: the sweep ran (failed candidates are in its report); 1: no candidate ran; 2: bad arguments."""
    import dagster as dg

    from hsi_dagster.cli.errors import UsageError
    from hsi_dagster.evaluation.configurations import EvalConfiguration
    from hsi_dagster.evaluation.engine import evaluate_configuration
    from hsi_dagster.llm import sweep
    from hsi_dagster.llm.errors import LlamaServerError
    from hsi_dagster.resources.llm import LlamaServerResource
    from hsi_dagster.settings import SettingsError
    from hsi_dagster.synthetic.scenarios import SCENARIOS_PATH, ScenarioFileError, load_scenarios, select_scenarios

    if args.scenarios < 1:
        raise UsageError(f"--scenarios {args.scenarios}: give at least 1")
    if args.endpoint and (args.tries or args.candidates):
        raise UsageError("--endpoint measures running servers as they are: leave out --try and --candidates")
    if args.tries and args.candidates:
        raise UsageError("give --try or --candidates, not both")
    try:
        baseline = sweep.load_baseline(args.env_file)
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    try:
        if args.endpoint:
            candidates = sweep.candidates_from_urls(args.endpoint)
        elif args.candidates:
            candidates = sweep.candidates_from_toml(args.candidates, baseline)
        else:
            candidates = sweep.candidates_from_tries(args.tries, baseline)
        scenarios = select_scenarios(load_scenarios(SCENARIOS_PATH), args.scenarios, [], args.split)
    except (sweep.CandidateError, ScenarioFileError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    startup = args.startup_timeout or baseline.LLM_STARTUP_TIMEOUT_SECONDS
    print(f"{len(candidates)} candidate(s), {len(scenarios)} scenario(s) each; logs and report in {out}", flush=True)

    runs: list[CandidateRun] = []
    for candidate in candidates:
        run = CandidateRun(candidate.name, dict(candidate.overrides), status="failed")
        print(f"{candidate.name}: starting", flush=True)
        try:
            with sweep.candidate_server(
                candidate, baseline, env_file=args.env_file, log_dir=out, startup_timeout=startup
            ) as server:
                llm, calls = recording_llm(
                    LlamaServerResource.from_settings(server.settings, server.settings.api_key), server.url
                )
                configuration = EvalConfiguration("sweep", "full")
                try:
                    result = evaluate_configuration(configuration, scenarios, llm, server.settings)
                finally:
                    llm.teardown_after_execution(dg.build_init_resource_context())
                server.refresh_memory()
                run.figures = figures_of(
                    result.results[configuration.model_name],
                    result.results[configuration.with_floor_name],
                    calls,
                    server.facts.peak_rss_bytes,
                )
                run.server = asdict(server.facts)
                if run.figures["verdicts"]:
                    run.status = "ok"
                else:  # e.g. every prompt too large for its slots: a configuration that cannot serve the pipeline
                    errors = [r.error for r in result.results[configuration.model_name] if r.error]
                    first = f"; first error: {errors[0]}" if errors else ""
                    run.reason = f"no verdicts ({statuses_line(run.figures['statuses'])}){first}"
        except sweep.CandidateFailed as exc:
            run.reason = str(exc)
        except (LlamaServerError, SettingsError) as exc:
            run.reason = f"{type(exc).__name__}: {exc}"
        runs.append(run)
        if run.status == "ok":
            f = run.figures
            print(
                f"  {f['verdicts']} verdicts in {f['seconds']} s: {cell(f['verdicts_per_minute'], '{:.2f}')}/min, "
                f"p95 {cell(f['latency_p95_s'], '{:.1f}')} s, schema-valid {cell(f['schema_valid_rate'], '{:.0%}')}",
                flush=True,
            )
        else:
            print(f"  failed: {run.reason}", flush=True)

    with_ratios(runs)
    recommendation = recommend(runs)
    title = f"{len(scenarios)} labeled scenarios per candidate, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    report = markdown(runs, recommendation, title)
    (out / "sweep.md").write_text(report, encoding="utf-8")
    document = {"title": title, "recommendation": recommendation, "candidates": [asdict(run) for run in runs]}
    (out / "sweep.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    png = chart_png(runs)
    if png is not None:
        (out / "sweep.png").write_bytes(png)
    print(report)
    print(f"written: {out / 'sweep.md'}, {out / 'sweep.json'}" + (f", {out / 'sweep.png'}" if png else ""))
    if not any(run.status == "ok" for run in runs):
        print("error: no candidate ran", file=sys.stderr)
        return 1
    return 0
