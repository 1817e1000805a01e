"""`risk_assessments`: the schema-constrained JSON verdict of the LLM for each batch, stored with its token figures."""

import hashlib
import json

import dagster as dg

from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.core.risk import RISK_JSON_SCHEMA, RiskAssessment, level_for_score, parse_assessment, repair_messages
from hsi_dagster.llm.client import ChatResult, LlamaRequestRejected, LlamaServerUnavailable, SchemaNotEnforced
from hsi_dagster.llm.options import short_model_name
from hsi_dagster.partitions import LLAMA_SLOTS_POOL, batch_partitions
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.storage.batches import batch_camera_id
from hsi_dagster.storage.pipeline_tables import count_assessments, load_prompt, save_assessment

SCHEMA_VALID = "output_matches_schema"
LEVEL_CONSISTENT = "level_matches_score"
ONE_ROW = "one_assessment_per_batch"
WITHIN_SLOT = "prompt_within_budget"

LLM_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def _validates(assessment: dict) -> bool:
    try:
        RiskAssessment.model_validate(assessment)
        return True
    except ValueError:
        return False


def _assess(llm: LlamaServerResource, messages: list[dict], max_tokens: int) -> tuple[dict, list[ChatResult]]:
    """One call, and one repair call if the reply cannot be used. Returns the row fields and the calls made."""
    first = llm.chat_json(messages, RISK_JSON_SCHEMA, max_tokens=max_tokens)
    calls = [first]
    parsed = parse_assessment(first.content)
    if not parsed.ok:
        second = llm.chat_json(
            repair_messages(messages, first.content, parsed.error or "invalid"), RISK_JSON_SCHEMA, max_tokens=max_tokens
        )
        calls.append(second)
        retry = parse_assessment(second.content)
        if retry.ok:
            parsed = retry
    if not parsed.ok:
        return {"status": "invalid_output", "error": parsed.error, "raw_output": calls[-1].content}, calls
    assessment = parsed.assessment
    assert assessment is not None
    return {
        "status": "ok",
        "risk_score": assessment.risk_score,
        "risk_level": assessment.risk_level,
        "model_risk_level": parsed.model_level,
        "summary": assessment.summary,
        "reasoning": assessment.reasoning,
        "assessment": assessment.model_dump(mode="json"),
        "raw_output": calls[-1].content,
        "error": "; ".join(parsed.warnings) or None,
    }, calls


@dg.asset(
    partitions_def=batch_partitions,
    deps=[budgeted_prompts],
    group_name="pipeline",
    kinds={"duckdb"},
    pool=LLAMA_SLOTS_POOL,
    retry_policy=LLM_RETRY_POLICY,
    check_specs=[
        dg.AssetCheckSpec(
            SCHEMA_VALID, asset="risk_assessments", description="The stored output validates against the risk schema"
        ),
        dg.AssetCheckSpec(LEVEL_CONSISTENT, asset="risk_assessments", description="risk_level follows from risk_score"),
        dg.AssetCheckSpec(
            ONE_ROW, asset="risk_assessments", blocking=True, description="Exactly one row for the batch"
        ),
        dg.AssetCheckSpec(WITHIN_SLOT, asset="risk_assessments", description="Server-counted prompt tokens <= budget"),
    ],
)
def risk_assessments(
    context: dg.AssetExecutionContext,
    duckdb: HsiDuckDBResource,
    llm: LlamaServerResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.MaterializeResult:
    """Risk score 0-100, level, summary and reasoning from llama-server; at most PARALLEL of these steps run at once."""
    settings = pipeline_settings.get()
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
        fields, calls = _assess(llm, messages, settings.NEMOTRON_MAX_OUTPUT_TOKENS)
    except (LlamaServerUnavailable, SchemaNotEnforced) as exc:
        # Nothing is written: the batch stays unassessed, the step is retried, and the sensor asks again later.
        raise dg.Failure(
            description=f"batch {batch_id}: {exc}", allow_retries=not isinstance(exc, SchemaNotEnforced)
        ) from exc
    except LlamaRequestRejected as exc:
        with duckdb.get_connection() as conn:
            save_assessment(conn, {**base_row, "status": "llm_rejected", "error": str(exc)})
        raise dg.Failure(
            description=f"batch {batch_id}: the server rejected the prompt: {exc}", allow_retries=False
        ) from exc

    last = calls[-1]
    row = {
        **base_row,
        **fields,
        "model": short_model_name(last.model or info.model),
        "prompt_tokens": calls[0].usage.prompt_tokens,
        "completion_tokens": sum(call.usage.completion_tokens for call in calls),
        "cached_tokens": calls[0].usage.cached_tokens,
        "context_utilization": calls[0].usage.prompt_tokens / prompt["context_budget"],
        "latency_ms": sum(call.latency_ms for call in calls),
    }
    with duckdb.get_connection() as conn:
        save_assessment(conn, row)
        rows_for_batch = count_assessments(conn, batch_id)
    if fields["status"] != "ok":
        context.log.warning(f"batch {batch_id}: output invalid after one repair attempt: {fields['error']}")

    schema_ok = fields["status"] == "ok" and _validates(fields["assessment"])
    level_ok = fields["status"] == "ok" and level_for_score(fields["risk_score"]) == fields["risk_level"]
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
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=SCHEMA_VALID,
                passed=schema_ok,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"status": fields["status"]},
            ),
            dg.AssetCheckResult(
                check_name=LEVEL_CONSISTENT,
                passed=level_ok,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"model_risk_level": str(fields.get("model_risk_level"))},
            ),
            dg.AssetCheckResult(check_name=ONE_ROW, passed=rows_for_batch == 1, metadata={"rows": rows_for_batch}),
            dg.AssetCheckResult(
                check_name=WITHIN_SLOT,
                passed=row["context_utilization"] <= 1.0,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"prompt_tokens": row["prompt_tokens"], "budget": prompt["context_budget"]},
            ),
        ],
    )
