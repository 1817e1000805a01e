"""`evaluation`: the labeled scenario set through production's enrichment, budget and risk code, per configuration.

One static partition per configuration (an endpoint and a quality level; the model is whatever that endpoint
serves). Each scenario goes the production way: `core.enrichment.build_context` at the configuration's quality
level with the example camera profiles the labels were written against (`scenario_profiles`), stored and read back
as JSON, `core.prompt.build_sections`, `core.budget.choose_budget` (the live per-slot context) and `fit_to_budget`,
then production's call-and-repair loop (`core.assessment.assess` via `assets.assessments.assess_on_server`).
Results, figures and Cohen's kappa against every other stored configuration go to DuckDB (storage/evaluation.py);
the markdown report with a confusion matrix per configuration and a comparison chart is the asset's metadata.

`hsi eval` runs the same code (`evaluate_and_store`) for the endpoints and quality levels it is given.
"""

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg

from hsi_dagster.assets.evaluation_charts import comparison_png, confusion_png, data_uri
from hsi_dagster.core.assessment import AssessmentOutcome
from hsi_dagster.core.budget import PromptTooLarge, TokenCounter, choose_budget, fit_to_budget
from hsi_dagster.core.camera_profiles import CameraProfile, camera_profile_text
from hsi_dagster.core.enrichment import QUALITY_LEVEL_TYPES, EnrichedContext, build_context
from hsi_dagster.core.evaluation import ConfigurationFigures, ScenarioResult, pairwise_kappa, summarise
from hsi_dagster.core.evaluation_report import render_report
from hsi_dagster.core.prompt import STATIC_SYSTEM_PROMPT, build_sections
from hsi_dagster.llm.errors import LlamaRequestRejected
from hsi_dagster.llm.protocol import ChatResult
from hsi_dagster.partitions import LLAMA_SLOTS_POOL
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.evaluation import (
    finish_run,
    load_agreement,
    load_configuration_details,
    load_figures,
    load_results,
    save_configuration,
    save_result,
    stored_configurations,
)
from hsi_dagster.synthetic.scenarios import (
    SCENARIOS_PATH,
    Scenario,
    load_scenarios,
    scenario_profiles,
    select_scenarios,
)

QUALITY_LEVELS: tuple[str, ...] = ("full", "standard", "minimal")  # core.sections.QUALITY_LEVELS, richest first
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class EvalConfiguration:
    """What one partition evaluates. `endpoint` None = the servers of the `llm` resource (LLAMA_SERVER_URL)."""

    name: str
    quality_level: str
    endpoint: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.quality_level not in QUALITY_LEVEL_TYPES:
            raise ValueError(
                f"configuration {self.name!r}: quality level {self.quality_level!r} is not one of "
                f"{sorted(QUALITY_LEVEL_TYPES)}"
            )
        if not self.name or _KEY_CHARS.search(self.name):
            raise ValueError(f"configuration name {self.name!r}: use letters, digits, '_', '.' and '-' only")


def endpoint_key(url: str) -> str:
    """A partition-key-safe name for an endpoint: host and port (`127.0.0.1_8091`)."""
    bare = re.sub(r"^[a-z]+://", "", url.strip().rstrip("/"))
    return _KEY_CHARS.sub("_", bare).strip("_") or "endpoint"


def configurations_for(
    endpoints: Sequence[str], quality_levels: Sequence[str], labels: Sequence[str] = ()
) -> list[EvalConfiguration]:
    """Every endpoint x quality level, named `<label>.<level>`; the label defaults to the endpoint's host and port
    (give one per endpoint to keep runs of different models on the same URL apart). No endpoint: the `llm`
    resource's servers, named by the level alone."""
    levels = list(dict.fromkeys(quality_levels)) or ["full"]
    if not endpoints:
        if labels:
            raise ValueError("a configuration label needs an endpoint (--label goes with --endpoint)")
        return [EvalConfiguration(level, level) for level in levels]
    unique = list(dict.fromkeys(url.strip().rstrip("/") for url in endpoints))
    if labels and len(labels) != len(unique):
        raise ValueError(f"{len(labels)} label(s) for {len(unique)} endpoint(s): give one label per endpoint")
    names = list(labels) or [endpoint_key(url) for url in unique]
    return [
        EvalConfiguration(f"{name}.{level}", level, endpoint=url)
        for name, url in zip(names, unique, strict=True)
        for level in levels
    ]


@dataclass(frozen=True)
class PreparedScenario:
    scenario: Scenario
    messages: list[dict] | None
    sections_removed: tuple[str, ...]
    error: str | None = None


def prepare_scenario(
    scenario: Scenario,
    *,
    quality_level: str,
    profiles: dict[str, CameraProfile],
    settings: HsiSettings,
    estimate_budget: int,
    counter: TokenCounter | None = None,
) -> PreparedScenario:
    """Production's context and budget steps (enriched_contexts, budgeted_prompts) for one scenario."""
    from hsi_dagster.assets.prompts import token_counter

    profile = profiles.get(scenario.camera_id)
    context = build_context(
        scenario.batch,
        scenario.detections,
        quality_level=quality_level,
        clip_noise_threshold=settings.CLIP_NOISE_THRESHOLD,
        camera_profile=profile,
        fast_path_labels=settings.FAST_PATH_LABELS,
        fast_path_confidence=settings.FAST_PATH_CONFIDENCE,
    )
    # Stored and read back as the pipeline does between enriched_contexts and budgeted_prompts.
    context = EnrichedContext.from_json(context.to_json())
    try:
        fitted = fit_to_budget(
            build_sections(context),
            camera_profile_text(profile),
            estimate_budget,
            counter or token_counter(),
            batch_id=scenario.batch["batch_id"],
        )
    except PromptTooLarge as exc:
        return PreparedScenario(scenario, None, (), error=str(exc))
    return PreparedScenario(scenario, fitted.messages, tuple(fitted.sections_removed))


def _injection_flagged(assessment: dict | None) -> bool:
    flags = (assessment or {}).get("flags") or []
    return any("inject" in str(flag.get("type", "")).lower() for flag in flags if isinstance(flag, dict))


def run_prepared(
    prepared: PreparedScenario,
    configuration: str,
    assess: Callable[[list[dict]], AssessmentOutcome[ChatResult]],
) -> ScenarioResult:
    """One scenario through the call-and-repair loop; a rejected prompt is a result, an unreachable server raises."""
    scenario = prepared.scenario
    base = ScenarioResult(
        configuration=configuration,
        scenario_id=scenario.scenario_id,
        category=scenario.category,
        expected_level=scenario.expected_level,
        band_low=scenario.score_band[0],
        band_high=scenario.score_band[1],
        adversarial=scenario.adversarial,
        status="pending",
        sections_removed=prepared.sections_removed,
    )
    if prepared.messages is None:
        return replace(base, status="prompt_too_large", error=prepared.error)
    started = time.perf_counter()
    try:
        outcome = assess(prepared.messages)
    except LlamaRequestRejected as exc:
        return replace(base, status="llm_rejected", error=str(exc), latency_ms=(time.perf_counter() - started) * 1000)
    fields, calls = outcome.fields(), outcome.replies
    ok = outcome.ok
    return replace(
        base,
        status=fields["status"],
        risk_score=fields.get("risk_score") if ok else None,
        risk_level=fields.get("risk_level") if ok else None,
        summary=fields.get("summary"),
        injection_flagged=_injection_flagged(fields.get("assessment")),
        llm_calls=len(calls),
        prompt_tokens=calls[0].usage.prompt_tokens,
        completion_tokens=sum(call.usage.completion_tokens for call in calls),
        cached_tokens=calls[0].usage.cached_tokens,
        latency_ms=sum(call.latency_ms for call in calls),
        generation_ms=sum(float((call.timings or {}).get("predicted_ms") or call.latency_ms) for call in calls),
        model=calls[-1].model or None,
        error=fields.get("error"),
    )


# ----------------------------------------------------------------------------------------------- a configuration
@dataclass
class ConfigurationRun:
    results: list[ScenarioResult]
    model: str
    slot_context: int
    budget: int
    budget_source: str
    seconds: float


def _assess_with(llm: LlamaServerResource, max_tokens: int) -> Callable[[list[dict]], AssessmentOutcome[ChatResult]]:
    from hsi_dagster.assets.assessments import assess_on_server  # production's call-and-repair loop on the server

    return lambda messages: assess_on_server(llm, messages, max_tokens)


def evaluate_configuration(
    configuration: EvalConfiguration,
    scenarios: Sequence[Scenario],
    llm: LlamaServerResource,
    settings: HsiSettings,
    *,
    on_result: Callable[[ScenarioResult], None] | None = None,
    concurrency: int | None = None,
    counter: TokenCounter | None = None,
    deadline: float | None = None,
) -> ConfigurationRun:
    """Every scenario under one configuration; at most `concurrency` (default: the server's slots) calls at once.
    With `deadline` (time.monotonic()), scenarios not started by then are left out of the run (a bench's bound)."""
    started = time.perf_counter()
    info = llm.ensure_ready()
    choice = choose_budget(
        llm.live_slot_context,
        configured_slot_context=settings.slot_context,
        max_output_tokens=settings.NEMOTRON_MAX_OUTPUT_TOKENS,
        safety_margin=settings.PROMPT_SAFETY_MARGIN_TOKENS,
        token_ratio=settings.PROMPT_TOKEN_RATIO,
    )
    profiles = scenario_profiles()
    prepared = [
        prepare_scenario(
            scenario,
            quality_level=configuration.quality_level,
            profiles=profiles,
            settings=settings,
            estimate_budget=choice.estimate_budget,
            counter=counter,
        )
        for scenario in scenarios
    ]
    assess = _assess_with(llm, settings.NEMOTRON_MAX_OUTPUT_TOKENS)
    workers = max(1, concurrency or min(info.total_slots, settings.PARALLEL))
    results: list[ScenarioResult] = []

    def run_one(item: PreparedScenario) -> ScenarioResult | None:
        if deadline is not None and time.monotonic() > deadline:
            return None
        return run_prepared(item, configuration.name, assess)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eval") as pool:
        for result in pool.map(run_one, prepared):
            if result is None:
                continue
            results.append(result)
            if on_result is not None:
                on_result(result)
    return ConfigurationRun(
        results=results,
        model=info.model,
        slot_context=choice.slot_context,
        budget=choice.budget,
        budget_source=choice.source,
        seconds=time.perf_counter() - started,
    )


def _llm_for(configuration: EvalConfiguration, llm: LlamaServerResource) -> LlamaServerResource:
    """The pipeline's server(s), or a resource for the configuration's endpoint with the same client settings (and
    API key: the endpoints compared are the user's own servers)."""
    if configuration.endpoint is None:
        return llm
    fields = {name: getattr(llm, name) for name in type(llm).model_fields}
    return type(llm)(**{**fields, "urls": [configuration.endpoint]})


@dataclass
class StoredRun:
    run: ConfigurationRun
    figures: ConfigurationFigures
    compared: list[str]  # every configuration with stored figures, this one included
    endpoint: str


def evaluate_and_store(
    configuration: EvalConfiguration,
    scenarios: Sequence[Scenario],
    llm: LlamaServerResource,
    settings: HsiSettings,
    duckdb: HsiDuckDBResource,
    *,
    on_result: Callable[[ScenarioResult], None] | None = None,
    concurrency: int | None = None,
    deadline: float | None = None,
) -> StoredRun:
    """Run one configuration, store each result as it comes (short connections: none is held across an LLM call),
    then its figures and its kappa against every other stored configuration. The asset and `hsi eval` both call it."""
    target = _llm_for(configuration, llm)

    def store(result: ScenarioResult) -> None:
        with duckdb.get_connection() as conn:
            save_result(conn, result)
        if on_result is not None:
            on_result(result)

    try:
        run = evaluate_configuration(
            configuration, scenarios, target, settings, on_result=store, concurrency=concurrency, deadline=deadline
        )
    finally:
        if target is not llm:
            target.teardown_after_execution(dg.build_init_resource_context())
    figures = summarise(configuration.name, run.results)
    endpoint = configuration.endpoint or ",".join(target.urls)
    with duckdb.get_connection() as conn:
        others = [c for c in stored_configurations(conn) if c != configuration.name]
        agreement = [(other, *pairwise_kappa(run.results, load_results(conn, other))) for other in others]
        save_configuration(
            conn,
            configuration.name,
            endpoint=endpoint,
            model=run.model,
            quality_level=configuration.quality_level,
            prompt_sha256=hashlib.sha256(STATIC_SYSTEM_PROMPT.encode()).hexdigest(),
            description=configuration.description,
        )
        finish_run(conn, figures, [r.scenario_id for r in run.results], agreement)
        compared = stored_configurations(conn)
    return StoredRun(run, figures, compared, endpoint)


def _metadata_value(value: float | int | None, digits: int = 4) -> float | int | str:
    if value is None:
        return "n/a"
    return round(value, digits) if isinstance(value, float) else value


def report_for(
    duckdb: HsiDuckDBResource,
    configurations: Sequence[str],
    scenario_source: str,
    *,
    image_ref: Callable[[str, bytes], str] = lambda key, png: data_uri(png),
) -> str:
    """The markdown report for stored configurations; `image_ref(key, png)` places each chart (default: embedded as
    a base64 data URI) and returns its reference."""
    with duckdb.get_connection(read_only=True) as conn:
        figures = load_figures(conn, configurations)
        results = [r for name in configurations for r in load_results(conn, name)]
        agreement = load_agreement(conn, configurations)
        details = load_configuration_details(conn)
    charts = {"comparison": comparison_png(figures)}
    for item in figures:
        charts[f"confusion:{item.configuration}"] = confusion_png(item)
    images = {key: image_ref(key, png) for key, png in charts.items()}
    return render_report(figures, results, agreement, details, scenario_source=scenario_source, images=images)


def evaluation_asset(
    configurations: Sequence[EvalConfiguration],
    *,
    scenarios_path: str | Path = SCENARIOS_PATH,
    limit: int | None = None,
    scenario_ids: Sequence[str] | None = None,
    name: str = "evaluation",
) -> dg.AssetsDefinition:
    """The `evaluation` asset over these configurations (static partitions, one per configuration); `limit` and
    `scenario_ids` run a subset (tests, quick checks)."""
    by_name = {c.name: c for c in configurations}
    if len(by_name) != len(configurations):
        raise ValueError("evaluation configurations need unique names")
    scenarios_path = Path(scenarios_path)

    @dg.asset(
        name=name,
        partitions_def=dg.StaticPartitionsDefinition(list(by_name)),
        group_name="evaluation",
        kinds={"duckdb"},
        pool=LLAMA_SLOTS_POOL,  # shares the llama-server slots with the pipeline's assessments
        description="Labeled scenarios through production's enrichment, budget and risk code, per configuration",
    )
    def _evaluation(
        context: dg.AssetExecutionContext,
        duckdb: HsiDuckDBResource,
        llm: LlamaServerResource,
        pipeline_settings: PipelineSettingsResource,
    ) -> dg.MaterializeResult:
        configuration = by_name[context.partition_key]
        settings = pipeline_settings.get()
        scenarios = select_scenarios(load_scenarios(scenarios_path), limit, scenario_ids)

        def log(result: ScenarioResult) -> None:
            context.log.info(
                f"{result.scenario_id} {result.category}: expected {result.expected_level}, "
                f"got {result.predicted or result.status} ({result.risk_score}) in {result.latency_ms / 1000:.1f} s"
            )

        stored = evaluate_and_store(configuration, scenarios, llm, settings, duckdb, on_result=log)
        run, figures = stored.run, stored.figures
        source = f"{scenarios_path.name} ({len(scenarios)} scenarios)"
        report = report_for(duckdb, stored.compared, source)
        adversarial = [r for r in run.results if r.adversarial]
        return dg.MaterializeResult(
            metadata={
                "model": run.model,
                "endpoint": stored.endpoint,
                "quality_level": configuration.quality_level,
                "scenarios": figures.scenarios,
                "schema_valid_rate": _metadata_value(figures.schema_valid_rate),
                "level_accuracy": _metadata_value(figures.level_accuracy),
                "macro_f1": _metadata_value(figures.macro_f1),
                "score_mae_to_band": _metadata_value(figures.score_mae_to_band),
                "under_call_rate": _metadata_value(figures.under_call_rate),
                "adversarial_handled": f"{figures.adversarial_correct} of {figures.adversarial_scenarios}",
                "adversarial_outcomes": "; ".join(
                    f"{r.scenario_id} {r.category}: expected {r.expected_level}, got {r.predicted or r.status}"
                    for r in adversarial
                )
                or "none in this run",
                "latency_p50_ms": _metadata_value(figures.latency_p50_ms),
                "latency_p95_ms": _metadata_value(figures.latency_p95_ms),
                "tokens_per_second": _metadata_value(figures.tokens_per_second),
                "prompt_tokens": figures.prompt_tokens,
                "cached_tokens": figures.cached_tokens,
                "completion_tokens": figures.completion_tokens,
                "context_budget": run.budget,
                "budget_source": run.budget_source,
                "run_seconds": round(run.seconds, 1),
                "report": dg.MetadataValue.md(report),
            }
        )

    return _evaluation


def default_configurations() -> list[EvalConfiguration]:
    """What `definitions.py` registers: every quality level on the pipeline's own server(s)."""
    return configurations_for([], QUALITY_LEVELS)


evaluation = evaluation_asset(default_configurations())
