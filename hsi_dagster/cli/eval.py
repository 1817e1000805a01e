"""`hsi eval`: the labeled scenarios on one or more endpoints and quality levels, a markdown report and charts.

Runs exactly what the `evaluation` asset runs (`evaluation.engine.evaluate_and_store`: production's enrichment,
evidence floor, budget, call-and-repair and verdict code; the `llm` resource built as the definitions build it),
stores results and figures in DuckDB, then writes `report.md` with a confusion matrix per configuration, figures
per split (tune / holdout) and a comparison chart (PNG files beside it) into `--out`. Each LLM pass stores three
configurations from one model call per scenario: the model alone, the model raised to the evidence floor, the floor
alone. `--floor-only` needs no server. The report covers every configuration stored in the database, so a model
evaluated earlier (same --db) is compared with today's.

`--set frigate` runs the Frigate-shaped set instead (evaluation/frigate_set.py: Frigate's MQTT payloads through the
real mapping and batching, no camera profiles unless --camera-profiles; one result per scene, its highest batch),
stored as `frigate.<configuration>` and reported apart from the project's set.

`--set visits` runs the cross-camera situations (synthetic/visit_situations.py: several batches on several cameras
each, all on the holdout split), with and without visits (`--visits`, default both: `visits.floor.full` and
`visits.floor.full.visits`), one result per situation (its highest batch), recall over the threats and false alarms
over the harmless situations in their own rows. `--visits on|both` adds `.visits` passes to the other sets too.
`--inputs frigate` runs the project's set with only what a Frigate install sends (core/evaluation/frigate_inputs.py),
stored as `<configuration>.frigate-inputs`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from hsi_dagster.settings import HsiSettings

if TYPE_CHECKING:
    from hsi_dagster.core.context.camera_profiles import CameraProfile
    from hsi_dagster.core.evaluation.metrics import ConfigurationFigures, ScenarioResult
    from hsi_dagster.evaluation.configurations import EvalConfiguration
    from hsi_dagster.evaluation.frigate_set import FrigateScenarios
    from hsi_dagster.evaluation.trust import TrustMeasurement

UNMATCHED = "unmatched"  # evaluation.frigate_set.UNMATCHED: a batch no labeled scene covers

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
        "--set",
        choices=["project", "frigate", "visits"],
        default="project",
        help="labeled set: the project's (default), the Frigate-shaped one (MQTT payloads through the real Frigate "
        "mapping and batching, no camera profiles; judged per scene by its highest batch) or the cross-camera "
        "situations (several batches on several cameras each; judged per situation by its highest batch)",
    )
    parser.add_argument(
        "--visits",
        choices=["off", "on", "both"],
        help="link each set's batches into visits and raise each floor by its visit (evaluation/visit_floors.py); "
        "both: a pass with and one without (default: both for --set visits, off otherwise)",
    )
    parser.add_argument(
        "--inputs",
        choices=["enriched", "frigate"],
        default="enriched",
        help="the project's set as written (default), or cut to what a Frigate install sends (detector record, "
        "recognised face/plate, plate, GenAI-like caption; no action, pose, violence, clothing, scene...)",
    )
    parser.add_argument(
        "--camera-profiles",
        metavar="FILE",
        help="with --set frigate: camera profiles for its cameras (e.g. what `hsi frigate profiles` proposes); "
        "stored as frigate.profiles.<...> beside the runs without (default: none, as a new Frigate user)",
    )
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


def split_lines(results: list[ScenarioResult]) -> list[str]:
    """Per split (holdout first): level accuracy, recall (high+critical), false alarms, adversarial handled."""
    from hsi_dagster.core.evaluation.metrics import summarise

    lines = []
    for split in sorted({r.split for r in results if r.split}, key=lambda s: (s != "holdout", s)):
        f = summarise(results[0].configuration, [r for r in results if r.split == split])
        recall = None if f.under_call_rate is None else 1 - f.under_call_rate
        lines.append(
            f"{split}: {f.scenarios} scenarios, level accuracy {_pct(f.level_accuracy)}, recall(high+critical) "
            f"{_pct(recall)} of {f.alert_scenarios}, false alarms {_pct(f.false_alarm_rate)} of {f.low_scenarios}, "
            f"adversarial handled {f.adversarial_correct} of {f.adversarial_scenarios}"
        )
    return lines


def _show_scenes(
    results: dict[str, list[ScenarioResult]],
    configuration: EvalConfiguration,
    frigate: FrigateScenarios,
    unmatched: list[ScenarioResult],
) -> None:
    """The Frigate-shaped set: one line per scene (its highest batch) of the stored verdict, then the batches no
    scene covers."""
    shown = results.get(configuration.floor_name if not configuration.llm else configuration.with_floor_name, [])
    for result in shown:
        got = result.predicted or result.status
        score = "" if result.risk_score is None else f" {result.risk_score}"
        mark = "ok" if result.predicted == result.expected_level else "MISS"
        batches = len(frigate.batches_by_scene.get(result.scenario_id, []))
        print(
            f"  {result.scenario_id} {result.split or '':<7} {result.category:<28} expected {result.expected_level:<8} "
            f"got {got}{score}  {mark}  ({batches} batch{'es' if batches != 1 else ''})",
            flush=True,
        )
    for result in unmatched:
        if result.configuration == configuration.floor_name:
            print(
                f"  {result.scenario_id}: a batch no scene covers, got {result.predicted or result.status}", flush=True
            )


def combine_situations(configuration: str, results: list[ScenarioResult]) -> list[ScenarioResult]:
    from hsi_dagster.evaluation.visit_set import combine_by_situation

    return combine_by_situation(configuration, results)


def _show_situations(
    results: dict[str, list[ScenarioResult]], configuration: EvalConfiguration, batches: list[ScenarioResult]
) -> None:
    """The cross-camera set: one line per situation (its batches' stored levels against the household's), then
    recall over the threats and false alarms over the harmless situations in their own rows, and the batches at the
    household's level."""
    from hsi_dagster.evaluation.visit_set import situation_rows

    name = configuration.floor_name if not configuration.llm else configuration.with_floor_name
    shown = results.get(name, [])
    mine = [r for r in batches if r.configuration == name]
    label = "with visits" if configuration.visits else "without visits"
    for result in shown:
        mark = "ok" if result.predicted == result.expected_level else "MISS"
        print(
            f"  {result.category:<32} expected {result.expected_level:<8} got {result.predicted or result.status:<8} "
            f"{mark:<4} {(result.summary or '').split('; loudest:')[0]}",
            flush=True,
        )
    for line in situation_rows(shown).lines():
        print(f"  {label}: {line}", flush=True)
    same = sum(r.predicted == r.expected_level for r in mine)
    print(f"  {label}: batches at the household's level: {same} of {len(mine)}", flush=True)


def chart_file_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key.replace(":", "-")) + ".png"


def run_eval(args: argparse.Namespace, settings: HsiSettings) -> int:
    from hsi_dagster.cli.errors import UsageError
    from hsi_dagster.evaluation.configurations import (
        FRIGATE_SET,
        VISITS_SET,
        configurations_for,
        floor_configurations,
        for_inputs,
        for_set,
        set_of,
    )
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
    frigate: FrigateScenarios | None = None
    profiles: dict[str, CameraProfile] | None = None
    if args.camera_profiles and args.set != "frigate":
        raise UsageError("--camera-profiles goes with --set frigate (the project's set has its own profiles)")
    if args.inputs != "enriched" and args.set != "project":
        raise UsageError("--inputs goes with the project's set (the other sets are written as their own input)")
    visit_set = args.set == "visits"
    if visit_set:
        if args.scenarios or args.limit is not None or args.camera_profiles:
            raise UsageError("--set visits is the stored cross-camera set: leave out --scenarios and --limit")
        from hsi_dagster.evaluation.visit_set import load_visit_set
        from hsi_dagster.synthetic.scenarios import ScenarioFileError as VisitSetError
        from hsi_dagster.synthetic.visit_situations import VISITS_PATH, visit_profiles

        path = VISITS_PATH
        try:
            scenarios = load_visit_set(path, split=args.split, ids=args.scenario)
        except VisitSetError as exc:
            raise UsageError(str(exc)) from None
        if not scenarios and args.split == "tune":
            raise UsageError(f"{path}: every situation is on the holdout split (nothing in this set is tuned on)")
        profiles = visit_profiles()
        print(
            f"{len({s.situation for s in scenarios})} situations ({len(scenarios)} batches) from {path}, camera "
            "profiles without a camera graph",
            flush=True,
        )
    elif args.set == "frigate":
        profiles = {}
        if args.camera_profiles:
            from hsi_dagster.core.context.camera_profiles import CameraProfileError
            from hsi_dagster.settings import load_camera_profiles

            try:
                profiles = load_camera_profiles(args.camera_profiles)
            except CameraProfileError as exc:
                raise UsageError(str(exc)) from None
        if args.scenarios or args.limit is not None:
            raise UsageError("--set frigate is the stored Frigate-shaped set: leave out --scenarios and --limit")
        from hsi_dagster.evaluation.frigate_set import frigate_scenarios
        from hsi_dagster.synthetic.frigate_eval import FRIGATE_EVAL_DIR, FrigateSetError

        path = FRIGATE_EVAL_DIR
        try:
            frigate = frigate_scenarios(settings, path, split=args.split, scene_ids=args.scenario)
        except (FrigateSetError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        scenarios = frigate.all()
        print(
            f"{len(frigate.scenes)} labeled scenes from {path}: {frigate.imported.messages} payloads, "
            f"{frigate.imported.detections} detections, {frigate.imported.reviews} review messages, "
            f"{frigate.imported.quarantined} quarantined -> {len(frigate.scenarios)} batches in scenes, "
            f"{len(frigate.unmatched)} batches no scene covers",
            flush=True,
        )
    else:
        path = Path(args.scenarios) if args.scenarios else SCENARIOS_PATH
        try:
            scenarios = select_scenarios(load_scenarios(path), args.limit, args.scenario, args.split)
        except ScenarioFileError as exc:
            raise UsageError(str(exc)) from None
    if not scenarios:
        raise UsageError(f"{path}: no scenarios")
    switch = {"off": [False], "on": [True], "both": [False, True]}
    history = switch[args.history]
    visits = switch[args.visits or ("both" if visit_set else "off")]
    try:
        if args.floor_only:
            if args.endpoint or args.label or args.schema:
                raise UsageError("--floor-only runs no model: leave out --endpoint, --label and --schema")
            configurations = floor_configurations(args.quality_level, history, visits)
        else:
            configurations = configurations_for(
                args.endpoint,
                args.quality_level,
                args.label,
                schemas=args.schema or ["plain"],
                history=history,
                visits=visits,
            )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    prefix = "" if frigate is None else f"{FRIGATE_SET}.profiles" if args.camera_profiles else FRIGATE_SET
    prefix = VISITS_SET if visit_set else prefix
    configurations = for_inputs(for_set(configurations, prefix), args.inputs)
    duckdb = HsiDuckDBResource.from_settings(settings)
    llm = None if args.floor_only else LlamaServerResource.from_settings(settings, settings.api_key)

    unmatched: list[ScenarioResult] = []
    batch_results: list[ScenarioResult] = []  # the cross-camera set's batches of the current pass

    def show(result: ScenarioResult) -> None:
        if visit_set:  # per batch: the situations are shown once combined
            batch_results.append(result)
            return
        if frigate is not None:  # per batch: the scenes are shown once combined
            if result.category == UNMATCHED:
                unmatched.append(result)
            return
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
        unmatched.clear()
        batch_results.clear()
        try:
            stored = evaluate_and_store(
                configuration,
                scenarios,
                llm,
                settings,
                duckdb,
                on_result=show,
                profiles=profiles,
                combine=frigate.combine_by_scene if frigate is not None else combine_situations if visit_set else None,
            )
        except LlamaServerError as exc:
            raise UsageError(f"configuration {configuration.name}: {exc}") from None
        if frigate is not None:
            _show_scenes(stored.run.results, configuration, frigate, unmatched)
        if visit_set:
            _show_situations(stored.run.results, configuration, batch_results)
        for name, f in stored.figures.items():
            print(
                f"  {name} ({stored.run.model}): level accuracy {_pct(f.level_accuracy)}, under-call "
                f"{_pct(f.under_call_rate)}, false alarms {_pct(f.false_alarm_rate)}, schema-valid "
                f"{_pct(f.schema_valid_rate)}, adversarial handled {f.adversarial_correct} of "
                f"{f.adversarial_scenarios}",
                flush=True,
            )
            for line in split_lines(stored.run.results.get(name, [])):
                print(f"    {line}", flush=True)
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
    this_set = VISITS_SET if visit_set else FRIGATE_SET if frigate is not None else ""
    names = [n for n in names if set_of(n) == this_set]  # one set per report
    source = f"{path.name} ({len(scenarios)} scenarios)"
    if visit_set:
        source = (
            f"the cross-camera set {path} ({len({s.situation for s in scenarios})} situations, {len(scenarios)} "
            "batches; judged per situation by its highest batch)"
        )
    if frigate is not None:
        stray = ", ".join(
            f"{s.scenario_id} {s.camera_id} {s.batch['started_at']:%Y-%m-%d %H:%M:%S}" for s in frigate.unmatched
        )
        source = (
            f"the Frigate-shaped set {path} ({len(frigate.scenes)} scenes, judged by their highest batch; "
            f"{len(frigate.scenarios)} batches in scenes; {len(frigate.unmatched)} batches no scene covers"
            + (f": {stray}" if stray else "")
            + ")"
        )
    report = report_for(duckdb, names, source, image_ref=place)
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

    if (
        args.scenarios
        or args.scenario
        or args.split
        or args.limit
        or args.history != "off"
        or args.quality_level
        or args.inputs != "enriched"
    ):
        raise UsageError(
            "--household replays the stored contexts: leave out --scenarios, --scenario, --split, --limit, "
            "--history, --quality-level and --inputs"
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
        if run.trust is not None:
            print(f"  trust applied: {run.trust.applied.value} ({run.trust.applied.reason})")
            print(f"  household trust: {run.trust.note}")
    return 0
