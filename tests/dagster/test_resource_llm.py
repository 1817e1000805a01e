"""LlamaServerResource inside a real Dagster materialization, against the real embedded server."""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from hsi_dagster.definitions import build_resources
from hsi_dagster.llm.client import LlamaServerError
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.resources import LlamaServerResource
from hsi_dagster.settings import load_settings
from hsi_dagster.steps import configured_slot_context
from tests.support.fake_openai import FakeOpenAI
from tests.support.llm_fixtures import RunningLlama, start_embedded

SCHEMA = {
    "type": "object",
    "properties": {"risk": {"enum": ["low", "medium", "high"]}, "summary": {"type": "string", "maxLength": 40}},
    "required": ["risk", "summary"],
}


@pytest.mark.llm
def test_resource_in_materialize_returns_parsed_json(llama_server: RunningLlama) -> None:
    """A tiny asset uses the resource in a real run: ready check, exact token count, schema-constrained JSON;
    the client is built by setup_for_execution and closed by teardown_after_execution."""
    used_clients = []

    @dg.asset
    def assessment(llm: LlamaServerResource) -> dict:
        assert llm._client is not None, "setup_for_execution did not build the client"
        used_clients.append(llm.get_client())
        info = llm.ensure_ready()
        messages = [{"role": "user", "content": "A person walked past the garage at noon. Rate the risk."}]
        result = llm.chat_json(messages, SCHEMA, max_tokens=64)
        assert result.parse_error is None, result.content
        return {
            "parsed": result.parsed,
            "slot_context": info.slot_context,
            "counted": llm.count_prompt_tokens(messages),
            "prompt_tokens": result.usage.prompt_tokens,
        }

    # A second URL in the list is accepted and ignored: this resource talks to the first one.
    resource = LlamaServerResource(urls=[llama_server.url, "http://127.0.0.1:9"], max_output_tokens=64)
    outcome = dg.materialize([assessment], resources={"llm": resource})
    assert outcome.success
    value = outcome.output_for_node("assessment")
    assert value["parsed"]["risk"] in ("low", "medium", "high")
    assert isinstance(value["parsed"]["summary"], str)
    assert value["slot_context"] == 4096
    assert value["counted"] == value["prompt_tokens"]
    assert used_clients and used_clients[0].base_url == llama_server.url
    assert used_clients[0].closed  # teardown_after_execution closed it


@pytest.mark.llm
def test_live_slot_context_from_real_server(llama_server: RunningLlama) -> None:
    """Outside a run the resource answers with the live per-slot context (so the None case below means something)."""
    resource = LlamaServerResource(urls=[llama_server.url])
    assert resource.live_slot_context() == configured_slot_context(llama_server.settings) == 4096
    assert resource.get_client() is resource.client()  # built lazily once


def test_live_slot_context_none_quickly_on_closed_port() -> None:
    """No server on the port: None within a second, so callers fall back to settings instead of hanging."""
    resource = LlamaServerResource(urls=[f"http://127.0.0.1:{free_port()}"])
    started = time.monotonic()
    assert resource.live_slot_context() is None
    assert time.monotonic() - started < 1.0


def test_build_resources_gives_the_llm_resource_plain_values_and_the_key_only_as_envvar() -> None:
    """One route: the settings' own split of LLAMA_SERVER_URL, PARALLEL and CTX_SIZE / PARALLEL as plain fields;
    the API key as dg.EnvVar("LLAMA_API_KEY"), and only when one is set."""
    settings = load_settings(
        os.devnull, LLAMA_SERVER_URL="http://a:1/, http://b:2", PARALLEL="4", CTX_SIZE="65536", LLAMA_API_KEY="sk-4711"
    )
    llm = build_resources(settings)["llm"]
    assert isinstance(llm, LlamaServerResource)
    assert llm.urls == ["http://a:1", "http://b:2"] and llm.routed
    assert (llm.fallback_total_slots, llm.fallback_slot_context) == (4, 16384)
    assert isinstance(llm.api_key, dg.EnvVar) and llm.api_key.env_var_name == "LLAMA_API_KEY"
    assert "sk-4711" not in repr(llm)
    without_key = build_resources(load_settings(os.devnull))["llm"]
    assert isinstance(without_key, LlamaServerResource)
    assert without_key.api_key is None and without_key.urls == ["http://127.0.0.1:8091"]


@pytest.fixture
def fake_vllm():
    """A FAKE OpenAI-compatible server without /props and without max_model_len (tests/support/fake_openai.py)."""
    fake = FakeOpenAI(max_model_len=None).start()
    try:
        yield fake
    finally:
        fake.stop()


def test_openai_compatible_fallbacks_come_from_fields_never_from_settings(fake_vllm, monkeypatch) -> None:
    """A FAKE OpenAI-compatible server (no /props, like vLLM; not a real server): slots and context come from the
    resource's fields; reading settings here would fail the test."""
    import hsi_dagster.settings

    def no_settings(*args, **kwargs):
        raise AssertionError("LlamaServerResource read the settings itself")

    monkeypatch.setattr(hsi_dagster.settings, "load_settings", no_settings)
    resource = LlamaServerResource(urls=[fake_vllm.url], fallback_total_slots=3, fallback_slot_context=5000)
    info = resource.ensure_ready()
    assert (info.total_slots, info.slot_context) == (3, 5000)
    with pytest.raises(LlamaServerError, match="PARALLEL"):
        LlamaServerResource(urls=[fake_vllm.url]).get_client().server_info()


@pytest.mark.llm
def test_api_key_reaches_a_real_server_through_envvar_at_run_time(tmp_path, monkeypatch) -> None:
    """A real embedded server that requires a key: a run with the resource from build_resources succeeds when
    LLAMA_API_KEY is in the environment, and fails naming the variable when it is only in the settings."""
    key = "sk-hsi-test-4711"
    process = start_embedded(tmp_path, {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 2, "LLAMA_API_KEY": key})
    try:
        settings = load_settings(
            os.devnull, LLAMA_SERVER_URL=process.url, LLAMA_API_KEY=key, CTX_SIZE="4096", PARALLEL="1"
        )
        resources = {"llm": build_resources(settings)["llm"]}
        assert key not in repr(resources)

        @dg.asset
        def counted(llm: LlamaServerResource) -> int:
            return llm.count_prompt_tokens([{"role": "user", "content": "a car in the driveway"}])

        monkeypatch.delenv("LLAMA_API_KEY", raising=False)
        with pytest.raises(Exception, match="LLAMA_API_KEY"):
            dg.materialize([counted], resources=resources)
        monkeypatch.setenv("LLAMA_API_KEY", "wrong-key")
        refused = dg.materialize([counted], resources=resources, raise_on_error=False)
        assert not refused.success
        monkeypatch.setenv("LLAMA_API_KEY", key)
        result = dg.materialize([counted], resources=resources)
        assert result.success and result.output_for_node("counted") > 5
    finally:
        process.stop()


def test_configured_fallback_context_is_budgeted_as_the_settings_not_as_the_server(fake_vllm) -> None:
    """FAKE OpenAI-compatible servers (not real ones): without max_model_len the context is the configured fallback,
    so the budget's source names the settings; with it, the server's figure is live. Behind a router the smallest
    context decides: a reported 4000 is live, a configured 5000 below a reported 6000 is the settings'."""
    from hsi_dagster.core.prompt.slot_budget import LIVE_BUDGET_SOURCE, SETTINGS_BUDGET_SOURCE, choose_budget

    def budget_of(resource: LlamaServerResource) -> tuple[int, str]:
        choice = choose_budget(
            resource.live_slot_context(),
            configured_slot_context=5000,
            max_output_tokens=512,
            safety_margin=256,
            token_ratio=1.0,
        )
        return choice.slot_context, choice.source

    reporting = FakeOpenAI(max_model_len=6000).start()
    smaller = FakeOpenAI(max_model_len=4000).start()
    try:
        fallbacks = {"fallback_total_slots": 2, "fallback_slot_context": 5000}
        configured = LlamaServerResource(urls=[fake_vllm.url], **fallbacks)
        assert configured.ensure_ready().slot_context_configured
        assert budget_of(configured) == (5000, SETTINGS_BUDGET_SOURCE)
        assert budget_of(LlamaServerResource(urls=[reporting.url], **fallbacks)) == (6000, LIVE_BUDGET_SOURCE)
        assert budget_of(LlamaServerResource(urls=[reporting.url, fake_vllm.url], **fallbacks)) == (
            5000,
            SETTINGS_BUDGET_SOURCE,
        )
        assert budget_of(LlamaServerResource(urls=[smaller.url, fake_vllm.url], **fallbacks)) == (
            4000,
            LIVE_BUDGET_SOURCE,
        )
    finally:
        reporting.stop()
        smaller.stop()
