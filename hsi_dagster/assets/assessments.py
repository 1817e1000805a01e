"""`risk_assessments`: the schema-constrained JSON verdict of the LLM for each batch, raised to the evidence floor
(core/verdict/final.py) and above it only as far as the answering model's trust (core/verdict/trust.py), stored with
the model's own score and level, the trust that applied and why, the floor's score and reasons, and its token figures.
"""

import hashlib
import json

import dagster as dg

from hsi_dagster.assets.checks import (
    MODEL_LEVEL,
    SERVER_TOKENS,
    STORED_VALID,
    TEXT_AGREES,
    model_level_matches_score,
    server_prompt_tokens_within_budget,
    stored_assessment_valid,
    stored_level_matches_its_text,
)
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.assets.run_config import AssessmentRunConfig
from hsi_dagster.assets.visits import stored_visit_metadata
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.prompt.messages import schema_of_messages
from hsi_dagster.core.prompt.risk_schema import PLAIN
from hsi_dagster.core.verdict.assessment import FLOOR_ONLY, OK, AssessmentOutcome
from hsi_dagster.core.verdict.final import Verdict
from hsi_dagster.core.verdict.trust import AUTO, ModelFingerprint, Trust, trust_for_answer
from hsi_dagster.evaluation.stored_floor import batch_floor
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
from hsi_dagster.steps import assess_batch, verdict_for
from hsi_dagster.storage.batches import batch_camera_id
from hsi_dagster.storage.evidence_alerts import attach_batch
from hsi_dagster.storage.pipeline_tables import load_assessment, load_context_json, load_prompt, save_assessment
from hsi_dagster.storage.trust import trust_record_for
from hsi_dagster.storage.visits import visit_of_batch

LLM_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def assess_on_server(
    llm: LlamaServerResource, messages: list[dict], max_tokens: int, schema: str = PLAIN
) -> AssessmentOutcome[ChatResult]:
    """The call-and-repair loop (core/verdict/assessment.py) with llama-server's schema-constrained chat as the call
    (temperature 0 and a fixed seed: the same batch judged twice gets the same answer)."""
    return assess_batch(messages, llm.chat_json, max_tokens=max_tokens, schema=schema)


def answering_trust(
    llm: LlamaServerResource,
    duckdb: HsiDuckDBResource,
    server_url: str,
    schema: str,
    quality_level: str,
    setting: int | str,
) -> Trust:
    """The trust of the model that answered (the server at `server_url`: several may sit behind the router): the
    MODEL_TRUST number, or with `auto` the trust measured for that model's fingerprint. A server that does not report
    its model, a model never measured, or a record measured for another size of the model: the stated default, with
    the reason on the row (never silent)."""
    identity = llm.model_identity(server_url or None)
    fingerprint = None
    record = None
    if identity is not None:
        fingerprint = ModelFingerprint(short_model_name(identity.name), identity.size, schema, quality_level)
        if setting == AUTO:
            with duckdb.get_connection() as conn:
                record = trust_record_for(conn, fingerprint)
    unreported = f"the server that answered ({server_url or llm.primary_url}) did not report its model"
    return trust_for_answer(setting, fingerprint, record, unreported=unreported)


def verdict_metadata(verdict: Verdict, ignored: tuple[str, ...]) -> dict:
    """Who decided and why, for the Dagster UI; the trust that applied, and a warning when it was not measured."""
    reasons = "\n".join(f"- {reason}" for reason in verdict.floor_reasons) or "- no evidence rule fired"
    if ignored:
        reasons += "\n\nIgnored (malformed enrichment):\n" + "\n".join(f"- {line}" for line in ignored)
    return {
        "decided_by": verdict.decided_by,
        "model_score": verdict.model_score if verdict.model_score is not None else -1,
        "floor_score": verdict.floor_score,
        "verdict": verdict.explanation(),
        "floor_reasons": dg.MetadataValue.md(reasons),
        "model_level": verdict.model_level or "none",
        "model_trust": verdict.trust.value,
        "trust_source": verdict.trust.source,
        "trust_reason": verdict.trust.reason,
        "model_note": verdict.note or "none",
        **({"trust_warning": f"unmeasured trust: {verdict.trust.reason}"} if verdict.trust.unmeasured else {}),
    }


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
        dg.AssetCheckSpec(
            TEXT_AGREES,
            asset="risk_assessments",
            description="A stored summary or rubric answers describing forced entry, a weapon or violence is not "
            "stored low (read from the text, not from the code that set the level)",
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
    schema = schema_of_messages(messages, settings.ASSESSMENT_SCHEMA)
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
        outcome = assess_on_server(llm, messages, max_output_tokens, schema)
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

    with duckdb.get_connection() as conn:
        floor, evidence_alert_keys = batch_floor(
            conn, batch_id, camera_id, settings, pipeline_settings.camera_profiles()
        )
        quality_level = EnrichedContext.from_json(load_context_json(conn, batch_id)).quality_level
        visit_columns = stored_visit_metadata(conn, visit_of_batch(conn, batch_id))
    calls = outcome.replies
    trust = answering_trust(llm, duckdb, calls[-1].server_url, schema, quality_level, settings.MODEL_TRUST)
    fields, verdict = verdict_for(outcome, floor, trust)
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
        attach_batch(conn, batch_id, evidence_alert_keys)
    with duckdb.get_connection() as conn:
        stored = load_assessment(conn, batch_id)
    if fields["status"] == FLOOR_ONLY:
        context.log.warning(
            f"batch {batch_id}: output invalid after one repair; evidence decides: {verdict.explanation()}"
        )
    elif fields["status"] != OK:
        context.log.warning(f"batch {batch_id}: output invalid after one repair attempt: {fields['error']}")
    if trust.unmeasured:
        context.log.warning(f"batch {batch_id}: MODEL_TRUST={settings.MODEL_TRUST}: {trust.reason} (run `hsi eval`)")
    if verdict.note:
        context.log.warning(f"batch {batch_id}: {verdict.note} (stored {verdict.level} {verdict.score})")

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
            "assessment_schema": schema,
            **verdict_metadata(verdict, floor.ignored),
            **visit_columns,
        },
        check_results=[
            stored_assessment_valid(stored),
            model_level_matches_score(stored),
            server_prompt_tokens_within_budget(stored),
            stored_level_matches_its_text(stored),
        ],
    )
