"""`budgeted_prompts`: the exact chat messages for a batch, fitted to one llama-server slot."""

import hashlib

import dagster as dg

from hsi_dagster.assets.checks import PROMPT_FITS, prompt_fits_budget
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.run_config import AssessmentRunConfig
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.prompt.budget import PromptTooLarge
from hsi_dagster.core.verdict.alerts import PROMPT_TOO_LARGE
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.steps import budget_for, prompt_for, token_counter
from hsi_dagster.storage.batches import batch_camera_id
from hsi_dagster.storage.pipeline_tables import load_context_json, load_prompt, save_assessment, save_prompt

PREVIEW_CHARS = 6000


@dg.asset(
    partitions_def=batch_partitions,
    deps=[enriched_contexts],
    group_name="pipeline",
    kinds={"duckdb"},
    check_specs=[
        dg.AssetCheckSpec(
            PROMPT_FITS,
            asset="budgeted_prompts",
            blocking=True,
            description="The stored messages, re-encoded whole and scaled by the token ratio, fit the budget",
        )
    ],
)
def budgeted_prompts(
    context: dg.AssetExecutionContext,
    config: AssessmentRunConfig,
    duckdb: HsiDuckDBResource,
    llm: LlamaServerResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Static instructions first (byte-identical, so the server's prompt cache reuses them), then the batch's sections;
    over budget, whole sections go in a fixed order, then the prompt degrades in a fixed order (core/prompt/budget.py).
    A batch whose floor does not fit is recorded as `prompt_too_large` (the run-failure sensor alerts) and not
    retried."""
    settings = pipeline_settings.get()
    max_output_tokens = config.output_tokens(settings)
    with duckdb.get_connection() as conn:
        enriched = EnrichedContext.from_json(load_context_json(conn, context.partition_key))
    choice = budget_for(settings, llm.live_slot_context(), max_output_tokens=max_output_tokens)
    try:
        fitted = prompt_for(
            enriched, choice.estimate_budget, settings.ASSESSMENT_SCHEMA, batch_id=context.partition_key
        )
    except PromptTooLarge as exc:
        with duckdb.get_connection() as conn:
            row = {
                "batch_id": context.partition_key,
                "camera_id": batch_camera_id(conn, context.partition_key),
                "status": PROMPT_TOO_LARGE,
                "error": str(exc),
                "context_budget": choice.budget,
            }
            save_assessment(conn, row)
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
    if fitted.warning:
        context.log.warning(fitted.warning)
    prefix_hash = hashlib.sha256(fitted.static_prefix.encode()).hexdigest()
    with duckdb.get_connection() as conn:
        save_prompt(
            conn,
            context.partition_key,
            messages=fitted.messages,
            tokens_estimate=fitted.tokens_after,
            tokens_before=fitted.tokens_before,
            budget=choice.budget,
            budget_source=choice.source,
            utilization=fitted.utilization,
            sections_removed=fitted.sections_removed,
            static_prefix_sha256=prefix_hash,
            prompt_degraded=fitted.degraded,
        )
    with duckdb.get_connection() as conn:
        stored = load_prompt(conn, context.partition_key)
    user_text = fitted.messages[-1]["content"]
    return dg.MaterializeResult(
        metadata={
            "prompt_tokens_estimate": fitted.tokens_after,
            "tokens_before_budgeting": fitted.tokens_before,
            "context_budget": choice.budget,
            "max_output_tokens": max_output_tokens,
            "estimate_budget_cl100k": choice.estimate_budget,
            "prompt_token_ratio": choice.token_ratio,
            "budget_source": choice.source,
            "slot_context": choice.slot_context,
            "context_utilization": round(fitted.utilization, 4),
            "sections_removed": ", ".join(fitted.sections_removed) or "none",
            "sections_shortened": ", ".join(fitted.sections_shortened) or "none",
            "prompt_degraded": ", ".join(fitted.degraded) or "none",
            "static_prefix_sha256": prefix_hash[:16],
            "prompt_preview": dg.MetadataValue.md(f"```\n{user_text[:PREVIEW_CHARS]}\n```"),
        },
        check_results=[
            prompt_fits_budget(stored["messages"], stored["context_budget"], choice.token_ratio, token_counter())
        ],
    )
