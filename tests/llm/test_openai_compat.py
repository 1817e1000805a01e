"""The OpenAI-compatible fallback (vLLM-style: no /health, /props, /slots, /apply-template) against a FAKE
OpenAI-compatible server (tests/support/fake_openai.py: fallback logic only, no model)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.llm.client import API_OPENAI, LlamaServerError, SchemaNotEnforced, TokenCountUnavailable
from hsi_dagster.llm.slots import slot_semaphore_size
from hsi_dagster.resources import LlamaServerResource
from tests.support.fake_openai import FakeOpenAI, fake_token_count

pytestmark = pytest.mark.fault

SCHEMA = {"type": "object", "properties": {"risk": {"enum": ["low", "medium", "high"]}}, "required": ["risk"]}


def ask(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "You rate security risk. Answer with JSON only."},
        {"role": "user", "content": f"Camera event number {i}: a person near the gate. Rate the risk."},
    ]


def test_fake_openai_server_fallback_readiness_slots_context_tokens(start_fake, fast_client) -> None:
    """FAKE OpenAI-compatible server (no /health, /props, /slots, /apply-template): ready via /v1/models, slots from
    configuration, per-slot context from max_model_len, exact count via /tokenize {messages}; the schema probe runs
    and completions name the model and drop llama-only fields."""
    fake = start_fake(FakeOpenAI, max_model_len=6000)
    with fast_client(fake.url, fallback_total_slots=3) as client:
        info = client.ensure_ready()
        counted = client.count_prompt_tokens(ask(7))
        result = client.chat_json(ask(7), SCHEMA, max_tokens=8)
    assert info.api == API_OPENAI and info.model == "nvidia/fake-nemotron"
    assert (info.total_slots, info.slot_context) == (3, 6000)
    assert set(info.missing_endpoints) == {"/health", "/props", "/slots", "/apply-template"}
    assert slot_semaphore_size(fake.url) == 3
    assert fake.count("/v1/models") >= 2  # readiness and info
    assert counted == fake_token_count(ask(7))
    assert result.parsed == {"risk": "low"}
    chats = [r.body for r in fake.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 2 and "nonce" in str(chats[0]["response_format"])  # the enforcement probe ran
    assert chats[-1]["model"] == "nvidia/fake-nemotron" and "cache_prompt" not in chats[-1]


def test_fake_openai_server_without_chat_tokenize_raises_catchable_error(start_fake, fast_client) -> None:
    """FAKE OpenAI-compatible server with no chat-aware /tokenize: count_prompt_tokens raises TokenCountUnavailable
    (a LlamaServerError) saying so, before and after ensure_ready; completions still work."""
    fake = start_fake(FakeOpenAI, tokenize_messages=False, has_health=True)
    with fast_client(fake.url, fallback_total_slots=2) as client:
        with pytest.raises(TokenCountUnavailable) as before:
            client.count_prompt_tokens(ask(1))
        info = client.ensure_ready()
        with pytest.raises(LlamaServerError) as after:
            client.count_prompt_tokens(ask(1))
        assert client.chat_json(ask(1), SCHEMA, max_tokens=8).parsed == {"risk": "low"}
    assert isinstance(after.value, TokenCountUnavailable)
    for err in (before, after):
        assert "exact token count unavailable on this server" in str(err.value) and fake.url in str(err.value)
    assert "/tokenize" in info.missing_endpoints and "/health" not in info.missing_endpoints


def test_fake_openai_server_context_from_configuration_or_a_clear_error(start_fake, fast_client) -> None:
    """FAKE OpenAI-compatible server whose /v1/models has no max_model_len: the configured per-slot context is used;
    without slots or context configured, the error says what to set."""
    fake = start_fake(FakeOpenAI, max_model_len=None)
    with fast_client(fake.url, fallback_total_slots=2, fallback_slot_context=3000) as client:
        assert client.server_info().slot_context == 3000
    with fast_client(fake.url, fallback_total_slots=2) as client, pytest.raises(LlamaServerError) as no_context:
        client.server_info()
    assert "max_model_len" in str(no_context.value) and "CTX_SIZE / PARALLEL" in str(no_context.value)
    with fast_client(fake.url, fallback_slot_context=3000) as client, pytest.raises(LlamaServerError) as no_slots:
        client.server_info()
    assert "PARALLEL" in str(no_slots.value)


def test_fake_openai_server_ignoring_the_schema_is_refused(start_fake, fast_client) -> None:
    """FAKE OpenAI-compatible server that ignores response_format: the enforcement probe still refuses it."""
    fake = start_fake(FakeOpenAI, ignore_schema=True)
    with fast_client(fake.url, fallback_total_slots=1) as client, pytest.raises(SchemaNotEnforced):
        client.ensure_ready()


def test_budgeted_prompts_asset_budgets_from_fake_openai_server(start_fake, tmp_path: Path) -> None:
    """The real budgeted_prompts asset with the resource pointed at a FAKE OpenAI-compatible server: live_slot_context
    comes from /v1/models max_model_len (the budget follows it) and the prompt is stored; the slot count is the
    resource's fallback_total_slots (PARALLEL, set by build_resources)."""
    from hsi_dagster.assets.batches import detection_batches
    from hsi_dagster.assets.contexts import enriched_contexts
    from hsi_dagster.assets.prompts import budgeted_prompts
    from hsi_dagster.sensors import batch_window_sensor
    from hsi_dagster.storage.ingest import ingest_lines
    from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick

    fake = start_fake(FakeOpenAI, max_model_len=6000)
    assert LlamaServerResource(urls=[fake.url], fallback_total_slots=2).live_slot_context() == 6000
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["gate"], 1, start=hours_ago(1)))
    res = resources(db, fake.url)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        key = tick.run_requests[0].partition_key
        assets = [detection_batches, enriched_contexts, budgeted_prompts]
        outcome = dg.materialize(assets, partition_key=key, instance=instance, resources=res)
    assert outcome.success
    metadata = outcome.asset_materializations_for_node("budgeted_prompts")[0].metadata
    assert metadata["slot_context"].value == 6000
    assert metadata["context_budget"].value == 6000 - 256 - 256  # pipeline_helpers: output 256, margin 256
    assert fake.count("/v1/chat/completions") == 0  # budgeting needs no inference
