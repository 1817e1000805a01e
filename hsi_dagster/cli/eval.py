"""`hsi eval`: the labeled scenarios on one or more endpoints and quality levels, a markdown report and charts.

Runs exactly what the `evaluation` asset runs (`evaluation.engine.evaluate_and_store`: production's enrichment,
evidence floor, budget, call-and-repair and verdict code; the `llm` resource built as the definitions build it),
stores results and figures in DuckDB, then writes `report.md` with a confusion matrix per configuration, figures
per split (tune / holdout) and a comparison chart (PNG files beside it) into `--out`. Each LLM pass stores three
configurations from one model call per scenario: the model alone, the model raised to the evidence floor, the floor
alone. `--floor-only` needs no server. The report covers every configuration stored in the database, so a model
evaluated earlier (same --db) is compared with today's.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from hsi_dagster.settings import HsiSettings

if TYPE_CHECKING:
    from hsi_dagster.core.evaluation.metrics import ConfigurationFigures
    from hsi_dagster.evaluation.trust import TrustMeasurement

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
    parser.add_argument(
        "--schema",
        action="append",
        default=[],
        choices=["plain", "rubric"],
        help="output schema of the model (rubric: yes/no answers before the score); repeat to compare (default: plain)",
    )
    parser.add_argument(
        "--history",
        choices=["off", "on", "both"],
        default="off",
        help="history facts from the scenarios' `history` for the floor (both: a pass with and one without)",
    )
    parser.add_argument(
        "--floor-only", action="store_true", help="only the evidence floor: no server, no model (milliseconds)"
    )
    parser.add_argument(
        "--split", choices=["tune", "holdout"], help="only the scenarios of this split (default: both, reported apart)"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="only N scenarios, taken round-robin over categories")
    parser.add_argument("--scenario", action="append", default=[], metavar="ID", help="only these scenario ids")
    parser.add_argument("--scenarios", metavar="FILE", help="scenario file (default: the stored labeled set)")
    parser.add_argument(
        "--household",
        action="store_true",
        help="the household's corrected batches from their stored contexts, the correction as the label",
    )
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"report folder (default {DEFAULT_OUT})")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else format(value, ".0%")


def trust_lines(measurement: TrustMeasurement) -> list[str]:
    """The trust sweep of a pass (holdout split): one row per trust 0-3, the recommendation and where it went."""
    lines = [f"trust applied to the with-floor verdicts: {measurement.applied.value} ({measurement.applied.reason})"]
    lines.append("trust sweep, holdout: trust  recall(high+critical)  false alarms  raise precision  raised  accuracy")
    for point in measurement.holdout:
        lines.append(
            f"  {point.trust}  {_pct(point.recall):>6}  {_pct(point.false_alarm_rate):>6}  "
            f"{_pct(point.raise_precision):>6}  {point.raised:>3}  {_pct(point.level_accuracy):>6}"
        )
    recommended = "none" if measurement.recommended is None else str(measurement.recommended)
    lines.append(f"recommended trust {recommended}: {measurement.note}")
    return lines


def chart_file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key.replace(":", "-")) + ".png"


def run_eval(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.cli.errors import UsageError
    from hsi_dagster.core.evaluation.metrics import ScenarioResult
    from hsi_dagster.evaluation.configurations import configurations_for, floor_configurations
    from hsi_dagster.evaluation.engine import evaluate_and_store
    from hsi_dagster.evaluation.report import report_for
    from hsi_dagster.llm.errors import LlamaServerError
    from hsi_dagster.resources import HsiDuckDBResource
    from hsi_dagster.resources.llm import LlamaServerResource
    from hsi_dagster.storage.evaluation import stored_configurations
    from hsi_dagster.synthetic.scenarios import SCENARIOS_PATH, ScenarioFileError, load_scenarios, select_scenarios

    if args.household:
        return run_household(args, settings)
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: give at least 1")
    path = Path(args.scenarios) if args.scenarios else SCENARIOS_PATH
    try:
        scenarios = select_scenarios(load_scenarios(path), args.limit, args.scenario, args.split)
    except ScenarioFileError as exc:
        raise UsageError(str(exc)) from None
    if not scenarios:
        raise UsageError(f"{path}: no scenarios")
    history = {"off": [False], "on": [True], "both": [False, True]}[args.history]
    try:
        if args.floor_only:
            if args.endpoint or args.label or args.schema:
                raise UsageError("--floor-only runs no model: leave out --endpoint, --label and --schema")
            configurations = floor_configurations(args.quality_level, history)
        else:
            configurations = configurations_for(
                args.endpoint, args.quality_level, args.label, schemas=args.schema or ["plain"], history=history
            )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    duckdb = HsiDuckDBResource.from_settings(settings)
    llm = None if args.floor_only else LlamaServerResource.from_settings(settings, settings.api_key)

    def show(result: ScenarioResult) -> None:
        if args.floor_only is False and not result.configuration.endswith(".with-floor"):
            return  # one line per scenario: the stored verdict (the model's and the floor's scores are on it)
        got = result.predicted or result.status
        score = "" if result.risk_score is None else f" {result.risk_score}"
        mark = "ok" if result.predicted == result.expected_level else "MISS"
        parts = f" (model {result.model_score}, floor {result.floor_score})" if result.llm_calls else ""
        print(
            f"  {result.scenario_id} {result.split or '':<7} {result.category:<22} expected "
            f"{result.expected_level:<8} got {got}{score}{parts}  {mark}  {result.latency_ms / 1000:.1f} s",
            flush=True,
        )

    print(f"{len(scenarios)} scenarios from {path}, {len(configurations)} configuration(s)", flush=True)
    for configuration in configurations:
        where = "no server" if not configuration.llm else configuration.endpoint or ", ".join(settings.llm_urls)
        print(f"{configuration.name}: {where}", flush=True)
        try:
            stored = evaluate_and_store(configuration, scenarios, llm, settings, duckdb, on_result=show)
        except LlamaServerError as exc:
            raise UsageError(f"configuration {configuration.name}: {exc}") from None
        for name, f in stored.figures.items():
            print(
                f"  {name} ({stored.run.model}): level accuracy {_pct(f.level_accuracy)}, under-call "
                f"{_pct(f.under_call_rate)}, false alarms {_pct(f.false_alarm_rate)}, schema-valid "
                f"{_pct(f.schema_valid_rate)}, adversarial handled {f.adversarial_correct} of "
                f"{f.adversarial_scenarios}",
                flush=True,
            )
        if stored.trust is not None:
            for line in trust_lines(stored.trust):
                print(f"  {line}", flush=True)
        print(f"  {stored.run.seconds:.0f} s", flush=True)
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


def figures_line(name: str, f: ConfigurationFigures) -> str:
    return (
        f"{name}: level accuracy {_pct(f.level_accuracy)}, under-call {_pct(f.under_call_rate)}, false alarms "
        f"{_pct(f.false_alarm_rate)}, schema-valid {_pct(f.schema_valid_rate)} ({f.scenarios} batches)"
    )


def run_household(args: argparse.Namespace, settings: HsiSettings) -> int:
    """`hsi eval --household`: evaluation/household.py, figures printed beside those of the stored verdicts."""
    from hsi_dagster.cli.errors import UsageError
    from hsi_dagster.evaluation.configurations import configurations_for, floor_configurations
    from hsi_dagster.evaluation.household import STORED, STORED_FLOOR, load_cases, replay
    from hsi_dagster.llm.errors import LlamaServerError
    from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
    from hsi_dagster.resources.llm import LlamaServerResource

    if args.scenarios or args.scenario or args.split or args.limit or args.history != "off" or args.quality_level:
        raise UsageError(
            "--household replays the stored contexts: leave out --scenarios, --scenario, --split, --limit, "
            "--history and --quality-level"
        )
    if not Path(settings.HSI_DUCKDB_PATH).exists():
        raise UsageError(f"no database at {settings.HSI_DUCKDB_PATH}: no corrections to replay")
    duckdb = HsiDuckDBResource.from_settings(settings)
    cases, skipped = load_cases(duckdb)
    for line in skipped:
        print(f"skipped: {line}")
    if not cases:
        print("no corrected batch with a stored context and verdict (`hsi correct`, `hsi corrections`)")
        return 0
    try:
        if args.floor_only:
            if args.endpoint or args.label or args.schema:
                raise UsageError("--floor-only runs no model: leave out --endpoint, --label and --schema")
            configurations = floor_configurations(["full"])
        else:
            configurations = configurations_for(args.endpoint, ["full"], args.label, schemas=args.schema or ["plain"])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    llm = None if args.floor_only else LlamaServerResource.from_settings(settings, settings.api_key)
    profiles = PipelineSettingsResource.from_settings(settings).camera_profiles()
    cameras = sorted({case.camera_id for case in cases})
    print(f"{len(cases)} corrected batches on {len(cameras)} camera(s): {', '.join(cameras)}")
    for configuration in configurations:
        try:
            run = replay(cases, configuration, llm, settings, duckdb, profiles)
        except LlamaServerError as exc:
            raise UsageError(f"configuration {configuration.name}: {exc}") from None
        print(f"{configuration.name} ({run.model}):")
        for name, figures in run.figures.items():
            if name not in (STORED, STORED_FLOOR):
                print(f"  {figures_line(name, figures)}")
        for name in (STORED, STORED_FLOOR):
            print(f"  {figures_line(name, run.figures[name])}")
        print(f"  replayed floor = stored floor on {run.faithful} of {len(cases)} batches")
        for line in run.differs:
            print(f"    differs: {line}")
    return 0
