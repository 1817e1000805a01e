"""LlamaClient under faults, injected by tests/fake_llama.py.

Every test here talks to a FAKE server used for fault injection only; the real server is covered in
tests/llm/test_llm_client.py. Each test checks behaviour (tries, requests seen) AND the error text.
"""

from __future__ import annotations

import logging
import pickle
import time

import pytest

from hsi_dagster.llm.client import (
    LlamaClient,
    LlamaRequestRejected,
    LlamaServerUnavailable,
    SchemaNotEnforced,
)
from hsi_dagster.llm.embedded import free_port
from tests.support.fake_llama import FakeLlama, Reply

pytestmark = pytest.mark.fault

SCHEMA = {"type": "object", "properties": {"risk": {"type": "string"}}, "required": ["risk"]}
MESSAGES = [{"role": "user", "content": "assess"}]


def make_client(url: str, **kwargs) -> LlamaClient:
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("startup_timeout", 5.0)
    return LlamaClient(url, **kwargs)


def test_waits_through_503_loading_then_ready(fake_llama: FakeLlama) -> None:
    """Fake server: 503 "Loading model" three times, then ready; the client must wait, not fail."""
    fake_llama.loading_then_ready(3)
    with make_client(fake_llama.url) as client:
        client.wait_until_ready()
    assert fake_llama.count("/health") == 4


def test_loading_forever_hits_startup_timeout(fake_llama: FakeLlama) -> None:
    """Fake server: still loading past the start-up timeout gives LlamaServerUnavailable naming URL and cause."""
    fake_llama.loading_then_ready(1000)
    started = time.monotonic()
    with make_client(fake_llama.url, startup_timeout=0.3) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.wait_until_ready()
    assert time.monotonic() - started < 2.0
    text = str(err.value)
    assert fake_llama.url in text and "not ready within 0.3 s" in text and "Loading model" in text


def test_connection_refused_is_unavailable_after_three_tries(caplog: pytest.LogCaptureFixture) -> None:
    """A closed port (no fake listening): three tries, then LlamaServerUnavailable naming the URL."""
    url = f"http://127.0.0.1:{free_port()}"
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    with make_client(url) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.server_info()
    text = str(err.value)
    assert f"GET {url}/props failed after 3 tries" in text
    assert "connection failed" in text
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2  # tries 1 and 2 are retried, try 3 raises


def test_slow_reply_times_out_is_retried_then_fails(fake_llama: FakeLlama) -> None:
    """Fake server: every completion is slower than the read timeout: retried max_tries times, then an error."""
    fake_llama.script("/v1/chat/completions", *[Reply(delay=1.0)] * 3)
    with make_client(fake_llama.url, read_timeout=0.2) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 3
    text = str(err.value)
    assert f"POST {fake_llama.url}/v1/chat/completions failed after 3 tries" in text
    assert "timed out" in text and "ReadTimeout" in text


def test_slow_once_then_fast_succeeds(fake_llama: FakeLlama) -> None:
    """Fake server: one reply slower than the read timeout, then a normal one: the retry recovers."""
    fake_llama.script("/v1/chat/completions", Reply(delay=1.0))
    with make_client(fake_llama.url, read_timeout=0.2) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert result.parsed == {"risk": "x"}
    assert fake_llama.count("/v1/chat/completions") == 2


def test_500_then_success_is_retried(fake_llama: FakeLlama, caplog: pytest.LogCaptureFixture) -> None:
    """Fake server: HTTP 500 once, then success: two tries, the result is parsed, the retry is logged."""
    fake_llama.script("/v1/chat/completions", Reply(500))
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    with make_client(fake_llama.url) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 2
    assert result.parsed == {"risk": "x"} and result.parse_error is None
    assert result.usage.prompt_tokens == 10
    assert any("HTTP 500" in r.getMessage() and "try 1/3" in r.getMessage() for r in caplog.records)


def test_500_every_time_gives_up_after_three(fake_llama: FakeLlama) -> None:
    """Fake server: 5xx on every try: exactly max_tries requests, then LlamaServerUnavailable with the status."""
    fake_llama.script("/v1/chat/completions", *[Reply(502)] * 5)
    with make_client(fake_llama.url) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 3
    assert "HTTP 502" in str(err.value) and fake_llama.url in str(err.value)


def test_400_is_not_retried(fake_llama: FakeLlama) -> None:
    """Fake server: HTTP 400: exactly one request, LlamaRequestRejected with the status and a body excerpt."""
    body = {"error": {"code": 400, "message": "the request exceeds the available context size", "type": "x"}}
    fake_llama.script("/v1/chat/completions", Reply(400, body))
    with make_client(fake_llama.url) as client, pytest.raises(LlamaRequestRejected) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 1
    assert err.value.status == 400
    text = str(err.value)
    assert "HTTP 400" in text and "exceeds the available context size" in text
    assert f"{fake_llama.url}/v1/chat/completions" in text
    copy = pickle.loads(pickle.dumps(err.value))  # survives crossing a process boundary
    assert copy.status == 400 and str(copy) == text


def test_schema_ignoring_server_fails_enforcement_probe(fake_llama: FakeLlama) -> None:
    """Fake server that ignores response_format: the nonce never comes back, so the client refuses to proceed."""
    fake_llama.ignore_schema = True
    with make_client(fake_llama.url) as client, pytest.raises(SchemaNotEnforced) as err:
        client.verify_schema_enforcement()
    text = str(err.value)
    assert fake_llama.url in text and "ignored the JSON schema" in text and "refusing to proceed" in text
    assert '{"status": "ok"}' in text  # what it sent instead
    sent = [r.body for r in fake_llama.requests if r.path == "/v1/chat/completions"][0]
    nonce = sent["response_format"]["json_schema"]["schema"]["properties"]["nonce"]["const"]
    assert nonce in text and nonce not in str(sent["messages"])  # the prompt never reveals it


def test_schema_honouring_fake_passes_probe(fake_llama: FakeLlama) -> None:
    """Control for the test above: the same probe passes when the (fake) server honours the schema."""
    with make_client(fake_llama.url) as client:
        client.verify_schema_enforcement()


def test_request_shape_and_bearer_header(fake_llama: FakeLlama) -> None:
    """Fake server records the request: json_schema response_format, thinking off, cache_prompt, Bearer key."""
    with make_client(fake_llama.url, api_key="s3cret-key") as client:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16, seed=7)
    request = [r for r in fake_llama.requests if r.path == "/v1/chat/completions"][0]
    assert request.headers.get("Authorization") == "Bearer s3cret-key"
    body = request.body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["cache_prompt"] is True and body["max_tokens"] == 16 and body["seed"] == 7


def test_api_key_never_in_error_text(fake_llama: FakeLlama, caplog: pytest.LogCaptureFixture) -> None:
    """Fake server echoes the key in its error bodies: neither exceptions nor logs may carry it."""
    key = "echoed-secret-123"
    echo = {"error": {"code": 401, "message": f"Invalid API Key {key}"}}
    fake_llama.script("/v1/chat/completions", Reply(503, {"error": {"message": f"busy {key}"}}), Reply(401, echo))
    caplog.set_level(logging.DEBUG)
    with make_client(fake_llama.url, api_key=key) as client, pytest.raises(LlamaRequestRejected) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert key not in str(err.value) and "***" in str(err.value)
    assert key not in caplog.text and "busy ***" in caplog.text
    assert key not in repr(client)


def test_max_in_flight_respects_slots(fake_llama: FakeLlama) -> None:
    """Fake server with 2 slots and slow replies: 6 threads on 3 clients never have more than 2 in flight."""
    from concurrent.futures import ThreadPoolExecutor

    fake_llama.script("/v1/chat/completions", *[Reply(delay=0.2)] * 6)
    clients = [make_client(fake_llama.url) for _ in range(3)]
    try:
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: clients[i % 3].chat_json(MESSAGES, SCHEMA, max_tokens=8), range(6)))
    finally:
        for client in clients:
            client.close()
    assert all(r.parsed == {"risk": "x"} for r in results)
    assert fake_llama.max_in_flight == 2
