"""The pipeline's steps, once: context for a batch, budget, prompt, floor, assessment and verdict.

The assets (assets/contexts.py, prompts.py, assessments.py), the evaluation engine (evaluation/engine.py) and the
config check (cli/config_findings.py) all call these functions, so "the evaluation runs production's code" and "the
config check computes the floor production would hit" hold by construction instead of by three copies of the same
wiring kept alike by hand.

Why here: each step reads the settings (the quality level, the noise threshold, the fast path, the budget's
terms, the output schema, the evidence rules), so it cannot live in core/, which never imports settings; and the
assets, the engine and the CLI all sit above this module in tests/test_layout.py's LAYERS (it is the layer right
after `settings`). It is pure all the same: no Dagster, DuckDB, HTTP or files. Whatever needs the outside world
comes in as a value: the server's live per-slot context, the camera profile, the history facts, the chat call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from hsi_dagster.core.context.camera_profiles import CameraProfile, camera_profile_text
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.context.history import HistoryFacts
from hsi_dagster.core.context.household_examples import CorrectedBatch, similar_examples
from hsi_dagster.core.prompt.budget import BudgetedPrompt, fit_to_budget, prompt_floor
from hsi_dagster.core.prompt.messages import build_sections, static_prompt
from hsi_dagster.core.prompt.risk_schema import assessment_schema
from hsi_dagster.core.prompt.slot_budget import BudgetChoice, choose_budget, slot_context
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.core.verdict.assessment import AssessmentOutcome, Reply, assess, verdict_fields
from hsi_dagster.core.verdict.evidence import EvidenceRules, Floor, evidence_floor
from hsi_dagster.core.verdict.exceptions import HouseholdException
from hsi_dagster.core.verdict.final import Verdict, final_verdict
from hsi_dagster.core.verdict.trust import Trust
from hsi_dagster.core.verdict.visit_rules import VisitLevel, raised_by_visit, visit_level
from hsi_dagster.core.visits.facts import visit_facts
from hsi_dagster.core.visits.linking import Visit
from hsi_dagster.core.visits.sighting import Sighting, sighting_of
from hsi_dagster.settings import HsiSettings

R = TypeVar("R", bound=Reply)
# the schema-constrained chat: (messages, JSON schema, max_tokens=...) -> reply (LlamaServerResource.chat_json)
ChatJson = Callable[..., R]


@functools.cache
def token_counter() -> TokenCounter:
    """One counter per process: its cache of the static prefix's count is what makes budgeting cheap."""
    return TokenCounter()


def context_for_batch(
    batch: Mapping[str, Any],
    detections: Sequence[Mapping[str, Any]],
    settings: HsiSettings,
    *,
    camera_profile: CameraProfile | None,
    quality_level: str | None = None,
    missing_types: Iterable[str] = (),
    history: HistoryFacts | None = None,
    reviews: Iterable[Mapping[str, Any]] = (),
    corrected: Iterable[CorrectedBatch] = (),
) -> EnrichedContext:
    """The batch's enriched context at ENRICHMENT_QUALITY_LEVEL (or `quality_level`, an evaluation pass's), with
    the Frigate review items covering its time span and the PROMPT_HOUSEHOLD_EXAMPLES corrected batches of
    `corrected` most similar to it (core/context/household_examples.py)."""
    context = build_context(
        batch,
        detections,
        quality_level=quality_level or settings.ENRICHMENT_QUALITY_LEVEL,
        clip_noise_threshold=settings.CLIP_NOISE_THRESHOLD,
        camera_profile=camera_profile,
        missing_types=missing_types,
        fast_path_labels=settings.FAST_PATH_LABELS,
        fast_path_confidence=settings.FAST_PATH_CONFIDENCE,
        history=history,
        reviews=reviews,
    )
    examples = similar_examples(context, corrected, settings.PROMPT_HOUSEHOLD_EXAMPLES) if corrected else []
    return context.model_copy(update={"household_examples": examples}) if examples else context


def configured_slot_context(settings: HsiSettings) -> int:
    """The per-slot context the settings give (CTX_SIZE / PARALLEL): the budget's fallback when the server is away."""
    return slot_context(settings.CTX_SIZE, settings.PARALLEL)


def budget_for(
    settings: HsiSettings, live_slot_context: int | None, *, max_output_tokens: int | None = None
) -> BudgetChoice:
    """The prompt budget: the server's live per-slot context when it answered (None: it did not), else the settings';
    minus the output reserve (`max_output_tokens`, default NEMOTRON_MAX_OUTPUT_TOKENS) and the safety margin, in
    served-model tokens and in cl100k estimates (PROMPT_TOKEN_RATIO)."""
    return choose_budget(
        live_slot_context,
        configured_slot_context=configured_slot_context(settings),
        max_output_tokens=settings.NEMOTRON_MAX_OUTPUT_TOKENS if max_output_tokens is None else max_output_tokens,
        safety_margin=settings.PROMPT_SAFETY_MARGIN_TOKENS,
        token_ratio=settings.PROMPT_TOKEN_RATIO,
    )


def prompt_for(
    context: EnrichedContext,
    estimate_budget: int,
    schema: str,
    *,
    batch_id: str | None,
    counter: TokenCounter | None = None,
) -> BudgetedPrompt:
    """The batch's messages for the output schema `schema`, fitted to `estimate_budget` cl100k tokens (PromptTooLarge
    when even the floor does not fit)."""
    return fit_to_budget(
        build_sections(context),
        camera_profile_text(context.camera_profile),
        estimate_budget,
        counter or token_counter(),
        batch_id=batch_id,
        static=static_prompt(schema),
    )


def prompt_floor_for(context: EnrichedContext, schema: str, counter: TokenCounter | None = None) -> int:
    """Tokens (cl100k) of the smallest prompt `prompt_for` can send for this context and schema."""
    return prompt_floor(
        build_sections(context),
        camera_profile_text(context.camera_profile),
        counter or token_counter(),
        static=static_prompt(schema),
    )


def floor_for(
    context: EnrichedContext,
    profile: CameraProfile | None,
    history: HistoryFacts | None,
    settings: HsiSettings,
    exceptions: Sequence[HouseholdException] = (),
    at: datetime | None = None,
) -> Floor:
    """The evidence floor of a batch with the settings' EVIDENCE_* rules and the household exceptions in force at
    `at` (storage/exceptions.py `exceptions_in_force` reads them; they may lift the presence rules only)."""
    return evidence_floor(context, profile, history, EvidenceRules.from_settings(settings), exceptions, at)


def sighting_for(context: EnrichedContext, profile: CameraProfile | None, settings: HsiSettings) -> Sighting | None:
    """What the batch adds to a visit (core/visits/sighting.py), with the household's plates and the floor's presence
    threshold; None: no person or vehicle (it joins no visit)."""
    rules = EvidenceRules.from_settings(settings)
    return sighting_of(context, profile, known_plates=rules.known_plates, min_confidence=rules.presence_min_confidence)


def visit_level_for(
    visit: Visit, settings: HsiSettings, earlier: Sequence[Visit] = (), *, other_nights: Sequence[Visit] = ()
) -> VisitLevel:
    """The visit's own floor (core/verdict/visit_rules.py) with the settings' night hours, the site's earlier
    visits of the night (`earlier`) and the visits of the week sharing a plate or name (`other_nights`)."""
    return visit_level(
        visit_facts(visit),
        EvidenceRules.from_settings(settings),
        [visit_facts(other) for other in earlier],
        other_nights=[visit_facts(other) for other in other_nights],
    )


def floor_with_visit(floor: Floor, visit: Visit | None) -> Floor:
    """The batch's floor starting from its visit's stored level (never lowered by it)."""
    if visit is None:
        return floor
    return raised_by_visit(floor, VisitLevel(visit.score, visit.level, visit.reasons))


def assess_batch(messages: list[dict], chat_json: ChatJson[R], *, max_tokens: int, schema: str) -> AssessmentOutcome[R]:
    """The call-and-repair loop (core/verdict/assessment.py) with the schema-constrained chat as the call."""
    json_schema = assessment_schema(schema)
    return assess(messages, lambda chat: chat_json(chat, json_schema, max_tokens=max_tokens), schema)


def verdict_for(outcome: AssessmentOutcome | None, floor: Floor, trust: Trust | int) -> tuple[dict[str, Any], Verdict]:
    """The stored verdict (core/verdict/final.py) of the model's outcome and the floor within the answering model's
    trust (core/verdict/trust.py), with the row's columns from the outcome; no outcome (the prompt did not fit, the
    server rejected it): the floor's verdict and no columns."""
    if outcome is None:
        return {}, final_verdict(None, floor, trust)
    return verdict_fields(outcome, floor, trust)
