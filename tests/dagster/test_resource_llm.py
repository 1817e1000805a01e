"""LlamaServerResource inside a real Dagster materialization, against the real embedded server."""

from __future__ import annotations

import time

import dagster as dg
import pytest

from hsi_dagster.llm.embedded import free_port
from hsi_dagster.resources import LlamaServerResource
from tests.support.llm_fixtures import RunningLlama

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
    resource = LlamaServerResource(base_url=f"{llama_server.url}, http://127.0.0.1:9", max_output_tokens=64)
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
    resource = LlamaServerResource(base_url=llama_server.url)
    assert resource.live_slot_context() == llama_server.settings.slot_context == 4096
    assert resource.get_client() is resource.client()  # built lazily once


def test_live_slot_context_none_quickly_on_closed_port() -> None:
    """No server on the port: None within a second, so callers fall back to settings instead of hanging."""
    resource = LlamaServerResource(base_url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert resource.live_slot_context() is None
    assert time.monotonic() - started < 1.0
