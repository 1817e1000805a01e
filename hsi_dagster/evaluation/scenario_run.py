"""One labeled scenario the production way: prepared (context, floor, prompt) and run once through the
call-and-repair loop, giving the model's result, the model raised to the floor within the trust, and the floor
alone (evaluation/configurations.py). The passes of evaluation/engine.py run these on a thread pool."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.history import HistoryFacts
from hsi_dagster.core.evaluation.frigate_inputs import frigate_like
from hsi_dagster.core.evaluation.metrics import ScenarioResult
from hsi_dagster.core.evaluation.scenario_history import history_facts_from_json
from hsi_dagster.core.prompt.budget import PromptTooLarge
from hsi_dagster.core.prompt.risk_schema import level_for_score
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.core.verdict.assessment import AssessmentOutcome
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.trust import Trust
from hsi_dagster.evaluation.configurations import EvalConfiguration
from hsi_dagster.llm.errors import LlamaRequestRejected
from hsi_dagster.llm.protocol import ChatResult
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import context_for_batch, floor_for, prompt_for, verdict_for
from hsi_dagster.synthetic.scenarios import Scenario

Assess = Callable[[list[dict]], AssessmentOutcome[ChatResult]]


@dataclass(frozen=True)
class PreparedScenario:
    scenario: Scenario
    messages: list[dict] | None
    sections_removed: tuple[str, ...]
    floor: Floor
    floor_ms: float
    error: str | None = None
    context: EnrichedContext | None = None  # as stored and read back: what the visit linking reads
    profile: CameraProfile | None = None


def scenario_history(scenario: Scenario, context: EnrichedContext, profile: CameraProfile | None) -> HistoryFacts:
    """The history facts of a scenario with `history`, by the function production's history step uses."""
    return history_facts_from_json(
        scenario.history or {},
        camera_id=scenario.camera_id,
        batch_start=context.batch.started_at,
        batch_labels=list(context.detections.by_label),
        timezone=profile.timezone if profile is not None else None,
    )


def prepare_scenario(
    scenario: Scenario,
    *,
    configuration: EvalConfiguration,
    profiles: Mapping[str, CameraProfile],
    settings: HsiSettings,
    estimate_budget: int | None,
    counter: TokenCounter | None = None,
) -> PreparedScenario:
    """Production's context, floor and budget steps for one scenario (`estimate_budget` None: no prompt needed)."""
    profile = profiles.get(scenario.camera_id)
    detections = frigate_like(scenario.detections) if configuration.inputs == "frigate" else scenario.detections
    context = context_for_batch(
        scenario.batch,
        detections,
        settings,
        camera_profile=profile,
        quality_level=configuration.quality_level,
        reviews=scenario.reviews,
    )
    if configuration.history and scenario.history:
        # What enriched_contexts does with the stored history: the facts ride on the context, the prompt renders
        # them as two sections and the floor reads them.
        context = context.model_copy(update={"history": scenario_history(scenario, context, profile)})
    # Stored and read back as the pipeline does between enriched_contexts and budgeted_prompts.
    context = EnrichedContext.from_json(context.to_json())
    started = time.perf_counter()
    floor = floor_for(context, profile, context.history, settings)
    floor_ms = (time.perf_counter() - started) * 1000
    if estimate_budget is None:
        return PreparedScenario(scenario, None, (), floor, floor_ms, context=context, profile=profile)
    try:
        fitted = prompt_for(
            context, estimate_budget, configuration.schema, batch_id=scenario.batch["batch_id"], counter=counter
        )
    except PromptTooLarge as exc:
        return PreparedScenario(scenario, None, (), floor, floor_ms, error=str(exc), context=context, profile=profile)
    return PreparedScenario(
        scenario,
        fitted.messages,
        tuple(fitted.sections_removed),
        floor,
        floor_ms,
        context=context,
        profile=profile,
    )


def _injection_flagged(assessment: dict | None) -> bool:
    flags = (assessment or {}).get("flags") or []
    return any("inject" in str(flag.get("type", "")).lower() for flag in flags if isinstance(flag, dict))


def _base(prepared: PreparedScenario, name: str) -> ScenarioResult:
    scenario = prepared.scenario
    return ScenarioResult(
        configuration=name,
        scenario_id=scenario.scenario_id,
        category=scenario.category,
        expected_level=scenario.expected_level,
        band_low=scenario.score_band[0],
        band_high=scenario.score_band[1],
        adversarial=scenario.adversarial,
        status="pending",
        sections_removed=prepared.sections_removed,
        split=scenario.split,
    )


def floor_result(prepared: PreparedScenario, name: str) -> ScenarioResult:
    """The evidence floor alone as a verdict (no model): its score and level, its reasons."""
    floor = prepared.floor
    return replace(
        _base(prepared, name),
        status="ok",
        risk_score=floor.score,
        risk_level=floor.level,
        summary="; ".join(floor.reasons) or "no evidence rule fired",
        latency_ms=prepared.floor_ms,
        floor_score=floor.score,
        floor_reasons=floor.reasons,
        decided_by="floor",
        model="evidence floor",
    )


def run_prepared(
    prepared: PreparedScenario, configuration: EvalConfiguration, assess_call: Assess, *, trust: Trust | int
) -> list[ScenarioResult]:
    """One scenario through the call-and-repair loop once: the model's result, the model raised to the floor within
    `trust`, and the floor alone. A rejected prompt is a result; an unreachable server raises."""
    floor = prepared.floor
    alone = floor_result(prepared, configuration.floor_name)
    model = _base(prepared, configuration.model_name)
    with_floor = _base(prepared, configuration.with_floor_name)
    if prepared.messages is None:
        model = replace(model, status="prompt_too_large", error=prepared.error)
        return [model, _floored(replace(model, configuration=with_floor.configuration), None, floor, trust), alone]
    started = time.perf_counter()
    try:
        outcome = assess_call(prepared.messages)
    except LlamaRequestRejected as exc:
        spent = (time.perf_counter() - started) * 1000
        model = replace(model, status="llm_rejected", error=str(exc), latency_ms=spent)
        return [model, _floored(replace(model, configuration=with_floor.configuration), None, floor, trust), alone]
    fields, calls = outcome.fields(), outcome.replies
    model_score = outcome.model_score
    measured = replace(
        model,
        status=fields["status"],
        risk_score=model_score,
        risk_level=level_for_score(model_score) if model_score is not None else None,
        model_score=model_score,
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
    floored = replace(
        measured, configuration=configuration.with_floor_name, latency_ms=measured.latency_ms + prepared.floor_ms
    )
    return [measured, _floored(floored, outcome, floor, trust), alone]


def _floored(
    result: ScenarioResult, outcome: AssessmentOutcome | None, floor: Floor, trust: Trust | int
) -> ScenarioResult:
    """The stored verdict (core/verdict/final.py): max(model score, floor) within the trust; `floor_only` when the
    model gave nothing usable but the floor alone stands."""
    _, verdict = verdict_for(outcome, floor, trust)
    model_score = outcome.model_score if outcome is not None else None
    stands = verdict.stands
    return replace(
        result,
        status=verdict.status if result.status in ("ok", "invalid_output") else result.status,
        risk_score=verdict.score if stands else None,
        risk_level=verdict.level if stands else None,
        model_score=model_score,
        floor_score=floor.score,
        floor_reasons=floor.reasons,
        decided_by=verdict.decided_by,
    )
