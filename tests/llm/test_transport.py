"""The transport under faults: retries with back-off on connection errors, timeouts and 5xx; 4xx never retried;
every error names the endpoint and never carries the API key.

The fault tests talk to a FAKE server (tests/support/fake_llama.py) used for fault injection only, through the
LlamaClient that composes the transport; the real server is covered in tests/llm/test_client.py.
"""

from __future__ import annotations

import logging
import pickle

import httpx
import pytest

from hsi_dagster.llm.client import LlamaRequestRejected, LlamaServerError, LlamaServerUnavailable
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.llm.transport import Transport
from tests.support.fake_llama import FakeLlama, Reply

fault = pytest.mark.fault

SCHEMA = {"type": "object", "properties": {"risk": {"type": "string"}}, "required": ["risk"]}
MESSAGES = [{"role": "user", "content": "assess"}]


@fault
def test_connection_refused_is_unavailable_after_three_tries(caplog: pytest.LogCaptureFixture, fast_client) -> None:
    """A closed port (no fake listening): three tries, then LlamaServerUnavailable naming the URL."""
    url = f"http://127.0.0.1:{free_port()}"
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    with fast_client(url) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.server_info()
    text = str(err.value)
    assert f"GET {url}/props failed after 3 tries" in text
    assert "connection failed" in text
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2  # tries 1 and 2 are retried, try 3 raises


@fault
def test_slow_reply_times_out_is_retried_then_fails(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: every completion is slower than the read timeout: retried max_tries times, then an error."""
    fake_llama.script("/v1/chat/completions", *[Reply(delay=1.0)] * 3)
    with fast_client(fake_llama.url, read_timeout=0.2) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 3
    text = str(err.value)
    assert f"POST {fake_llama.url}/v1/chat/completions failed after 3 tries" in text
    assert "timed out" in text and "ReadTimeout" in text


@fault
def test_slow_once_then_fast_succeeds(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: one reply slower than the read timeout, then a normal one: the retry recovers."""
    fake_llama.script("/v1/chat/completions", Reply(delay=1.0))
    with fast_client(fake_llama.url, read_timeout=0.2) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert result.parsed == {"risk": "x"}
    assert fake_llama.count("/v1/chat/completions") == 2


@fault
def test_500_then_success_is_retried(fake_llama: FakeLlama, caplog: pytest.LogCaptureFixture, fast_client) -> None:
    """Fake server: HTTP 500 once, then success: two tries, the result is parsed, the retry is logged."""
    fake_llama.script("/v1/chat/completions", Reply(500))
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    with fast_client(fake_llama.url) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 2
    assert result.parsed == {"risk": "x"} and result.parse_error is None
    assert result.usage.prompt_tokens == 10
    assert any("HTTP 500" in r.getMessage() and "try 1/3" in r.getMessage() for r in caplog.records)


@fault
def test_500_every_time_gives_up_after_three(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: 5xx on every try: exactly max_tries requests, then LlamaServerUnavailable with the status."""
    fake_llama.script("/v1/chat/completions", *[Reply(502)] * 5)
    with fast_client(fake_llama.url) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 3
    assert "HTTP 502" in str(err.value) and fake_llama.url in str(err.value)


@fault
def test_400_is_not_retried(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: HTTP 400: exactly one request, LlamaRequestRejected with the status and a body excerpt."""
    body = {"error": {"code": 400, "message": "the request exceeds the available context size", "type": "x"}}
    fake_llama.script("/v1/chat/completions", Reply(400, body))
    with fast_client(fake_llama.url) as client, pytest.raises(LlamaRequestRejected) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert fake_llama.count("/v1/chat/completions") == 1
    assert err.value.status == 400
    text = str(err.value)
    assert "HTTP 400" in text and "exceeds the available context size" in text
    assert f"{fake_llama.url}/v1/chat/completions" in text
    copy = pickle.loads(pickle.dumps(err.value))  # survives crossing a process boundary
    assert copy.status == 400 and str(copy) == text


@fault
def test_api_key_never_in_error_text(fake_llama: FakeLlama, caplog: pytest.LogCaptureFixture, fast_client) -> None:
    """Fake server echoes the key in its error bodies: neither exceptions nor logs may carry it."""
    key = "echoed-secret-123"
    echo = {"error": {"code": 401, "message": f"Invalid API Key {key}"}}
    fake_llama.script("/v1/chat/completions", Reply(503, {"error": {"message": f"busy {key}"}}), Reply(401, echo))
    caplog.set_level(logging.DEBUG)
    with fast_client(fake_llama.url, api_key=key) as client, pytest.raises(LlamaRequestRejected) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=16)
    assert key not in str(err.value) and "***" in str(err.value)
    assert key not in caplog.text and "busy ***" in caplog.text
    assert key not in repr(client)


def test_one_http_base_url_and_at_least_one_try():
    """A list of URLs, a URL without a scheme or max_tries=0 are refused before anything is sent."""
    with pytest.raises(ValueError, match="one base URL"):
        Transport("http://a:1,http://b:2")
    with pytest.raises(ValueError, match="must start with http"):
        Transport("localhost:8080")
    with pytest.raises(ValueError, match="max_tries"):
        Transport("http://127.0.0.1:1", max_tries=0)
    transport = Transport(" http://127.0.0.1:1/ ", backoff_base=0.5)
    assert transport.base_url == "http://127.0.0.1:1"
    assert transport.where("GET", "/props") == "GET http://127.0.0.1:1/props"
    transport.close()
    assert transport.closed


def test_backoff_doubles_with_at_most_ten_percent_jitter():
    transport = Transport("http://127.0.0.1:1", backoff_base=0.5)
    for attempt, base in ((1, 0.5), (2, 1.0), (3, 2.0)):
        assert base <= transport.backoff(attempt) <= base * 1.1
    transport.close()


def test_scrub_replaces_the_key_everywhere():
    transport = Transport("http://127.0.0.1:1", api_key="k-123")
    assert transport.scrub("bad key k-123 (k-123)") == "bad key *** (***)"
    assert transport.describe({"echo": "k-123"}) == '{"echo": "***"}'
    assert transport.has_api_key and not Transport("http://127.0.0.1:1").has_api_key
    transport.close()


@fault
def test_one_failed_try_returns_the_response_of_the_next(fake_llama: FakeLlama):
    """Transport alone against a FAKE server: a 503 then the normal answer; the response is returned as is."""
    fake_llama.script("/props", Reply(503))
    with Transport(fake_llama.url, backoff_base=0.01) as transport:
        props = transport.call("GET", "/props")
    assert props["total_slots"] == 2 and fake_llama.count("/props") == 2


def test_a_bad_url_is_not_retried():
    """An httpx error that is not a network problem (here an unsupported protocol) fails at once, naming the URL."""
    mock = httpx.MockTransport(_unsupported)
    with Transport("http://127.0.0.1:1", transport=mock) as transport, pytest.raises(LlamaServerError) as err:
        transport.request("GET", "/props")
    assert type(err.value) is LlamaServerError  # not LlamaServerUnavailable: no retries were made
    assert "GET http://127.0.0.1:1/props failed: UnsupportedProtocol" in str(err.value)


def _unsupported(request: httpx.Request) -> httpx.Response:
    raise httpx.UnsupportedProtocol("no such protocol")
