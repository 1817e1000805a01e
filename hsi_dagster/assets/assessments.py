"""`risk_assessments`: the schema-constrained JSON verdict of the LLM for each batch, stored with its token figures."""

import hashlib
import json

import dagster as dg

from hsi_dagster.assets.checks import (
    MODEL_LEVEL,
    SERVER_TOKENS,
    STORED_VALID,
    model_level_matches_score,
    server_prompt_tokens_within_budget,
    stored_assessment_valid,
)
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.assets.run_config import AssessmentRunConfig
from hsi_dagster.core.assessment import OK, AssessmentOutcome, assess
from hsi_dagster.core.risk import RISK_JSON_SCHEMA
from hsi_dagster.llm.client import (
    ChatResult,
    LlamaRequestRejected,
    LlamaServerNotRunning,
    LlamaServerUnavailable,
    SchemaNotEnforced,
)
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.partitions import LLAMA_SLOTS_POOL, batch_partitions
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.storage.batches import batch_camera_id
from hsi_dagster.storage.pipeline_tables import load_assessment, load_prompt, save_assessment

LLM_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def assess_on_server(llm: LlamaServerResource, messages: list[dict], max_tokens: int) -> AssessmentOutcome[ChatResult]:
    """The call-and-repair loop (core/assessment.py) with llama-server's schema-constrained chat as the call."""
    return assess(messages, lambda chat: llm.chat_json(chat, RISK_JSON_SCHEMA, max_tokens=max_tokens))


@dg.asset(
    partitions_def=batch_partitions,
    deps=[budgeted_prompts],
    group_name="pipeline",
    kinds={"duckdb"},
    pool=LLAMA_SLOTS_POOL,
    retry_policy=LLM_RETRY_POLICY,
    check_specs=[
        dg.AssetCheckSpec(
            STORED_VALID,
            asset="risk_assessments",
            description="The row as read back: its JSON validates against the schema sent to the server and agrees "
            "with the columns; the level is the band of the score",
        ),
        dg.AssetCheckSpec(
            MODEL_LEVEL, asset="risk_assessments", description="The model's own risk_level is the band of its score"
        ),
        dg.AssetCheckSpec(
            SERVER_TOKENS, asset="risk_assessments", description="Server-counted prompt tokens <= budget"
        ),
    ],
)
def risk_assessments(
    context: dg.AssetExecutionContext,
    config: AssessmentRunConfig,
    duckdb: HsiDuckDBResource,
    llm: LlamaServerResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Risk score 0-100, level, summary and reasoning from llama-server; at most PARALLEL of these steps run at once."""
    settings = pipeline_settings.get()
    max_output_tokens = config.output_tokens(settings)
    batch_id = context.partition_key
    with duckdb.get_connection() as conn:
        prompt = load_prompt(conn, batch_id)
        camera_id = batch_camera_id(conn, batch_id)
    messages = prompt["messages"]
    prompt_hash = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    base_row = {
        "batch_id": batch_id,
        "camera_id": camera_id,
        "context_budget": prompt["context_budget"],
        "sections_removed": prompt["sections_removed"],
        "prompt_sha256": prompt_hash,
    }
    try:
        info = llm.ensure_ready()
        outcome = assess_on_server(llm, messages, max_output_tokens)
    except (LlamaServerUnavailable, SchemaNotEnforced) as exc:
        # Nothing is written: the batch stays unassessed and the sensor asks again later. The step is retried only
        # when the server may answer within the retry delays: not when nothing listens at the URL (no retry storm).
        raise dg.Failure(
            description=f"batch {batch_id}: {exc}",
            allow_retries=not isinstance(exc, (SchemaNotEnforced, LlamaServerNotRunning)),
        ) from exc
    except LlamaRequestRejected as exc:
        with duckdb.get_connection() as conn:
            save_assessment(conn, {**base_row, "status": "llm_rejected", "error": str(exc)})
        raise dg.Failure(
            description=f"batch {batch_id}: the server rejected the prompt: {exc}", allow_retries=False
        ) from exc

    fields = outcome.fields()
    calls = outcome.replies
    row = {
        **base_row,
        **fields,
        "model": short_model_name(calls[-1].model or info.model),
        "prompt_tokens": calls[0].usage.prompt_tokens,
        "completion_tokens": sum(call.usage.completion_tokens for call in calls),
        "cached_tokens": calls[0].usage.cached_tokens,
        "context_utilization": calls[0].usage.prompt_tokens / prompt["context_budget"],
        "latency_ms": sum(call.latency_ms for call in calls),
    }
    with duckdb.get_connection() as conn:
        save_assessment(conn, row)
    with duckdb.get_connection() as conn:
        stored = load_assessment(conn, batch_id)
    if fields["status"] != OK:
        context.log.warning(f"batch {batch_id}: output invalid after one repair attempt: {fields['error']}")

    return dg.MaterializeResult(
        metadata={
            "camera_id": camera_id,
            "status": fields["status"],
            "risk_score": fields.get("risk_score"),
            "risk_level": fields.get("risk_level") or "none",
            "summary": fields.get("summary") or fields.get("error") or "",
            "prompt_tokens": row["prompt_tokens"],
            "cached_tokens": row["cached_tokens"],
            "completion_tokens": row["completion_tokens"],
            "context_utilization": round(row["context_utilization"], 4),
            "latency_ms": round(row["latency_ms"], 1),
            "llm_calls": len(calls),
            "model": row["model"],
            "max_output_tokens": max_output_tokens,
        },
        check_results=[
            stored_assessment_valid(stored),
            model_level_matches_score(stored),
            server_prompt_tokens_within_budget(stored),
        ],
    )
