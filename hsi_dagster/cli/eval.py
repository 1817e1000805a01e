"""`hsi eval`: the labeled scenarios on one or more endpoints and quality levels, a markdown report and charts.

Runs exactly what the `evaluation` asset runs (`assets.evaluation.evaluate_and_store`: production's enrichment,
budget and call-and-repair code), stores results and figures in DuckDB, then writes `report.md` with a confusion
matrix per configuration and a comparison chart (PNG files beside it) into `--out`. The report covers every
configuration stored in the database, so a model evaluated earlier (same --db) is compared with today's.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from hsi_dagster.settings import HsiSettings

DEFAULT_OUT = "data/eval-report"


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="URL",
        help="a llama-server (or OpenAI-compatible) base URL; repeat to compare (default: LLAMA_SERVER_URL)",
    )
    parser.add_argument(
        "--quality-level",
        action="append",
        default=[],
        choices=["full", "standard", "minimal"],
        help="enrichment quality level; repeat to compare (default: full)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME",
        help="a name per --endpoint (default: its host_port); keeps runs of two models on one URL apart",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only N scenarios, taken round-robin over categories")
    parser.add_argument("--scenario", action="append", default=[], metavar="ID", help="only these scenario ids")
    parser.add_argument("--scenarios", metavar="FILE", help="scenario file (default: the stored labeled set)")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"report folder (default {DEFAULT_OUT})")


def chart_file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key.replace(":", "-")) + ".png"


def run_eval(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.assets.evaluation import configurations_for, evaluate_and_store, report_for
    from hsi_dagster.cli.main import UsageError
    from hsi_dagster.core.evaluation import ScenarioResult
    from hsi_dagster.llm.errors import LlamaServerError
    from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource
    from hsi_dagster.storage.evaluation import stored_configurations
    from hsi_dagster.synthetic.scenarios import SCENARIOS_PATH, ScenarioFileError, load_scenarios, select_scenarios

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: give at least 1")
    path = Path(args.scenarios) if args.scenarios else SCENARIOS_PATH
    try:
        scenarios = select_scenarios(load_scenarios(path), args.limit, args.scenario)
    except ScenarioFileError as exc:
        raise UsageError(str(exc)) from None
    if not scenarios:
        raise UsageError(f"{path}: no scenarios")
    try:
        configurations = configurations_for(args.endpoint, args.quality_level, args.label)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    duckdb = HsiDuckDBResource(database=settings.HSI_DUCKDB_PATH)
    llm = LlamaServerResource(
        urls=settings.llm_urls,
        api_key=settings.api_key,
        read_timeout_seconds=settings.LLM_READ_TIMEOUT_SECONDS,
        startup_timeout_seconds=settings.LLM_STARTUP_TIMEOUT_SECONDS,
        max_output_tokens=settings.NEMOTRON_MAX_OUTPUT_TOKENS,
        fallback_total_slots=settings.PARALLEL,
        fallback_slot_context=settings.slot_context,
        slot_lease_dir=settings.HSI_SLOT_LEASE_DIR,
        probe_cache_dir=settings.HSI_PROBE_CACHE_DIR,
    )

    def show(result: ScenarioResult) -> None:
        got = result.predicted or result.status
        score = "" if result.risk_score is None else f" {result.risk_score}"
        mark = "ok" if result.predicted == result.expected_level else "MISS"
        print(
            f"  {result.scenario_id} {result.category:<22} expected {result.expected_level:<8} got {got}{score}"
            f"  {mark}  {result.latency_ms / 1000:.1f} s",
            flush=True,
        )

    print(f"{len(scenarios)} scenarios from {path}, {len(configurations)} configuration(s)", flush=True)
    for configuration in configurations:
        print(f"{configuration.name}: {configuration.endpoint or ', '.join(settings.llm_urls)}", flush=True)
        try:
            stored = evaluate_and_store(configuration, scenarios, llm, settings, duckdb, on_result=show)
        except LlamaServerError as exc:
            raise UsageError(f"configuration {configuration.name}: {exc}") from None
        f = stored.figures
        print(
            f"  model {stored.run.model}: level accuracy {f.level_accuracy:.0%}, under-call "
            f"{'n/a' if f.under_call_rate is None else format(f.under_call_rate, '.0%')}, schema-valid "
            f"{f.schema_valid_rate:.0%}, adversarial handled {f.adversarial_correct} of {f.adversarial_scenarios}, "
            f"{stored.run.seconds:.0f} s",
            flush=True,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def place(key: str, png: bytes) -> str:
        name = chart_file_name(key)
        (out / name).write_bytes(png)
        return name

    with duckdb.get_connection(read_only=True) as conn:
        names = stored_configurations(conn)  # earlier runs in this database too: compare a model with a stored one
    report = report_for(duckdb, names, f"{path.name} ({len(scenarios)} scenarios)", image_ref=place)
    (out / "report.md").write_text(report, encoding="utf-8")
    print(f"report: {out / 'report.md'} (charts beside it); results in {settings.HSI_DUCKDB_PATH}")
    return 0
