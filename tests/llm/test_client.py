"""LlamaClient against the REAL embedded llama.cpp server (SmolLM2-135M in a subprocess, 2 slots x 4096 tokens),
and its readiness wait, schema-enforcement probe and request shape against a FAKE server (fault injection only)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel, Field

from hsi_dagster.llm.client import LlamaClient, LlamaRequestRejected, LlamaServerUnavailable, SchemaNotEnforced
from hsi_dagster.llm.embedded import EmbeddedServerProcess
from hsi_dagster.llm.slots import slot_semaphore_size
from hsi_dagster.steps import configured_slot_context
from tests.support.fake_llama import FakeLlama
from tests.support.llm_fixtures import RunningLlama, start_embedded

llm = pytest.mark.llm
fault = pytest.mark.fault

API_KEY = "hsi-test-key-7f3a9c"
SCHEMA = {"type": "object", "properties": {"risk": {"type": "string"}}, "required": ["risk"]}
MESSAGES = [{"role": "user", "content": "assess"}]


class Verdict(BaseModel):
    risk: Literal["low", "medium", "high"]
    reason: str = Field(max_length=40)


def ask(topic: str) -> list[dict]:
    return [
        {"role": "system", "content": "You rate security risk. Answer with JSON only."},
        {"role": "user", "content": f"A camera saw: {topic}. Rate the risk."},
    ]


@dataclass
class KeyedServer:
    process: EmbeddedServerProcess
    not_ready_probes: int
    waited_seconds: float


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    """A second real server, with LLAMA_API_KEY, started WITHOUT waiting: the client's readiness wait does it."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("hsi_dagster.llm")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    process = start_embedded(
        tmp_path_factory.mktemp("keyed"),
        {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 2, "LLAMA_API_KEY": API_KEY},
        wait=False,
    )
    try:
        started = time.monotonic()
        with LlamaClient(process.url, startup_timeout=60, backoff_base=0.05) as client:
            client.wait_until_ready()  # /health needs no key
        waited = time.monotonic() - started
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        not_ready = sum("not ready yet" in r.getMessage() for r in records)
        yield KeyedServer(process, not_ready, waited)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        process.stop()


@llm
def test_wait_until_ready_covers_server_startup(keyed_server: KeyedServer) -> None:
    """The client waited through a server that was not up yet (refused/loading), and it is healthy afterwards."""
    assert keyed_server.not_ready_probes >= 1
    assert keyed_server.waited_seconds < 60
    assert httpx.get(f"{keyed_server.process.url}/health").status_code == 200


@llm
def test_per_slot_context_is_ctx_size_over_parallel(llama_server: RunningLlama) -> None:
    """/props reports the context of ONE slot: CTX_SIZE / PARALLEL = 8192 / 2, as configured_slot_context says."""
    with LlamaClient(llama_server.url) as client:
        client.wait_until_ready()
        info = client.server_info()
    assert info.slot_context == 4096 == configured_slot_context(llama_server.settings)
    assert info.total_slots == 2 == llama_server.settings.PARALLEL
    assert info.model == "SmolLM2-135M-Instruct.Q4_1"  # the --alias (the GGUF's base name), not the file path
    assert info.chat_template and "<|im_start|>" in info.chat_template


@llm
def test_schema_constrained_completion_parses_into_pydantic(llama_server: RunningLlama) -> None:
    """The real model's output, constrained by the JSON schema, validates as the pydantic model."""
    with LlamaClient(llama_server.url) as client:
        result = client.chat_json(ask("a person at the back door at 3am"), Verdict.model_json_schema(), max_tokens=64)
    assert result.parse_error is None, result.content
    verdict = Verdict.model_validate(result.parsed)
    assert verdict.risk in ("low", "medium", "high")
    assert result.finish_reason == "stop"
    assert result.usage.prompt_tokens > 20 and 0 < result.usage.completion_tokens <= 64
    assert result.latency_ms > 0 and result.timings["predicted_n"] == result.usage.completion_tokens
    assert result.model == "SmolLM2-135M-Instruct.Q4_1"


@llm
def test_enforcement_probe_and_ensure_ready(llama_server: RunningLlama) -> None:
    """The nonce probe passes on the real server; ensure_ready caches per base URL and sizes the slot limiter."""
    with LlamaClient(llama_server.url) as client:
        client.verify_schema_enforcement()
        info = client.ensure_ready()
    with LlamaClient(llama_server.url) as other:
        assert other.ensure_ready() is info  # once per process per URL
    assert info.slot_context == 4096
    assert slot_semaphore_size(llama_server.url) == 2


@llm
def test_count_prompt_tokens_equals_server_usage(llama_server: RunningLlama) -> None:
    """/apply-template + /tokenize gives exactly the prompt_tokens the real completion reports."""
    messages = ask(f"a delivery van, plate {uuid.uuid4().hex[:8]}")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    with LlamaClient(llama_server.url) as client:
        counted = client.count_prompt_tokens(messages)
        result = client.chat_json(messages, schema, max_tokens=16)
    assert counted == result.usage.prompt_tokens
    assert counted > 25


@llm
def test_api_key_required_and_never_leaked(keyed_server: KeyedServer, caplog: pytest.LogCaptureFixture) -> None:
    """With LLAMA_API_KEY the server answers 401 without the key and works with it; the key leaks nowhere."""
    url = keyed_server.process.url
    caplog.set_level(logging.DEBUG)
    assert httpx.get(f"{url}/props").status_code == 401

    with LlamaClient(url, max_tries=1) as anonymous, pytest.raises(LlamaRequestRejected) as err:
        anonymous.server_info()
    assert err.value.status == 401 and f"GET {url}/props" in str(err.value)

    wrong = API_KEY[::-1]
    with LlamaClient(url, api_key=wrong) as mistaken, pytest.raises(LlamaRequestRejected) as wrong_err:
        mistaken.count_prompt_tokens(ask("a cat"))
    assert wrong_err.value.status == 401

    with LlamaClient(url, api_key=API_KEY) as client:
        info = client.ensure_ready()
        result = client.chat_json(ask("a cat on the porch"), Verdict.model_json_schema(), max_tokens=64)
    assert info.total_slots == 1 and info.slot_context == 4096
    Verdict.model_validate(result.parsed)

    for text in (str(err.value), str(wrong_err.value), caplog.text, repr(client)):
        assert API_KEY not in text and wrong not in text
    assert API_KEY not in keyed_server.process.log_path.read_text()


# --- against a FAKE server (fault injection only) ------------------------------------------------------------


@fault
def test_waits_through_503_loading_then_ready(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: 503 "Loading model" three times, then ready; the client must wait, not fail."""
    fake_llama.loading_then_ready(3)
    with fast_client(fake_llama.url) as client:
        client.wait_until_ready()
    assert fake_llama.count("/health") == 4


@fault
def test_loading_forever_hits_startup_timeout(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: still loading past the start-up timeout gives LlamaServerUnavailable naming URL and cause."""
    fake_llama.loading_then_ready(1000)
    started = time.monotonic()
    with fast_client(fake_llama.url, startup_timeout=0.3) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.wait_until_ready()
    assert time.monotonic() - started < 2.0
    text = str(err.value)
    assert fake_llama.url in text and "not ready within 0.3 s" in text and "Loading model" in text


@fault
def test_schema_ignoring_server_fails_enforcement_probe(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server that ignores response_format: the nonce never comes back, so the client refuses to proceed."""
    fake_llama.ignore_schema = True
    with fast_client(fake_llama.url) as client, pytest.raises(SchemaNotEnforced) as err:
        client.verify_schema_enforcement()
    text = str(err.value)
    assert fake_llama.url in text and "ignored the JSON schema" in text and "refusing to proceed" in text
    assert '{"status": "ok"}' in text  # what it sent instead
    sent = [r.body for r in fake_llama.requests if r.path == "/v1/chat/completions"][0]
    nonce = sent["response_format"]["json_schema"]["schema"]["properties"]["nonce"]["const"]
    assert nonce in text and nonce not in str(sent["messages"])  # the prompt never reveals it


@fault
def test_schema_honouring_fake_passes_probe(fake_llama: FakeLlama, fast_client) -> None:
    """Control for the test above: the same probe passes when the (fake) server honours the schema."""
    with fast_client(fake_llama.url) as client:
        client.verify_schema_enforcement()


@fault
def test_request_shape_and_bearer_header(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server records the request: json_schema response_format, thinking off, cache_prompt, Bearer key."""
    with fast_client(fake_llama.url, api_key="s3cret-key") as client:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16, seed=7)
    request = [r for r in fake_llama.requests if r.path == "/v1/chat/completions"][0]
    assert request.headers.get("Authorization") == "Bearer s3cret-key"
    body = request.body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["cache_prompt"] is True and body["max_tokens"] == 16 and body["seed"] == 7
