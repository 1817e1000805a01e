"""Streamed completions: the read timeout measures a stalled server, never the length of a generation.

The real-server test runs an embedded llama.cpp server (THREADS=1) under a CPU hog: a completion much longer
than the stall timeout succeeds in one request. The other tests talk to a FAKE server (tests/support/fake_llama.py)
used for fault injection only: a stream that is slow but alive, one that stalls mid-way, one that is garbage, and
error events inside the stream.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from hsi_dagster.llm.client import LlamaClient, LlamaRequestRejected, LlamaServerError, LlamaServerUnavailable
from hsi_dagster.llm.embedded import EmbeddedServerProcess
from tests.support.fake_llama import FakeLlama, Reply
from tests.support.llm_fixtures import start_embedded

llm = pytest.mark.llm
fault = pytest.mark.fault

CHAT = "/v1/chat/completions"
# Four string fields: the fake's reply is 53 characters, streamed three per chunk (18 content chunks).
SCHEMA = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in ("risk", "reason", "camera", "action")},
    "required": ["risk", "reason", "camera", "action"],
}
MESSAGES = [{"role": "user", "content": "assess"}]


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]


def _wait_for(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@fault
def test_slow_stream_that_keeps_progressing_is_not_timed_out(
    fake_llama: FakeLlama, fast_client, caplog: pytest.LogCaptureFixture
) -> None:
    """Fake server: a token every 0.2 s, 18 chunks (3.6 s in all), stall timeout 1 s: one request succeeds, its
    slot (this process's limiter and the cross-process lease) held while it streams."""
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    client = fast_client(fake_llama.url, read_timeout=1.0)
    client.ensure_ready()  # the schema probe goes first, unscripted
    fake_llama.script(CHAT, Reply(gap=0.2))
    results = []
    worker = threading.Thread(target=lambda: results.append(client.chat_json(MESSAGES, SCHEMA, max_tokens=64)))
    worker.start()
    _wait_for(lambda: fake_llama.in_flight == 1, "the streamed completion")
    assert client.slot_lease().held() == 1 and client._slot_limiter().free == 1
    worker.join(60)
    assert results and results[0].parsed == {"risk": "x", "reason": "x", "camera": "x", "action": "x"}
    assert results[0].latency_ms > 1000.0  # the stall timeout was shorter than the whole reply
    assert results[0].usage.prompt_tokens == 10 and results[0].timings == {"prompt_n": 10, "predicted_n": 5}
    assert fake_llama.count(CHAT) == 2  # the probe and the one completion: no retry
    assert _retries(caplog) == []
    assert client.slot_lease().held() == 0 and client._slot_limiter().free == 2


@fault
def test_stream_that_stalls_mid_way_fails_naming_the_endpoint(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: two chunks, then silence on every try: after max_tries, an error naming the endpoint, that it
    stalled, for how long and where."""
    fake_llama.script(CHAT, *[Reply(stall_after=2)] * 3)
    with fast_client(fake_llama.url, read_timeout=0.5) as client, pytest.raises(LlamaServerUnavailable) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=64)
    text = str(err.value)
    assert f"POST {fake_llama.url}/v1/chat/completions failed after 3 tries" in text
    assert "stalled, no progress for 0.5 s after 2 generated token(s)" in text
    assert fake_llama.count(CHAT) == 3
    assert client.slot_lease().held() == 0


@fault
def test_a_stall_once_is_retried(fake_llama: FakeLlama, fast_client, caplog: pytest.LogCaptureFixture) -> None:
    """Fake server: one stream stalls, the next is whole: the retry recovers, the stall is logged."""
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    fake_llama.script(CHAT, Reply(stall_after=1))
    with fast_client(fake_llama.url, read_timeout=0.5) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=64)
    assert result.parsed == {"risk": "x", "reason": "x", "camera": "x", "action": "x"}
    assert fake_llama.count(CHAT) == 2
    assert len(_retries(caplog)) == 1 and "stalled" in _retries(caplog)[0]


@fault
@pytest.mark.parametrize(
    ("raw", "content_type", "expected"),
    [
        (b"\x00\xffgarbage\n\n", "text/event-stream", "sent a line that is not a server-sent event"),
        (b"data: <html>bad gateway</html>\n\n", "text/event-stream", "sent a stream event that is not JSON"),
        (b'data: {"no": "choices"}\n\n', "text/event-stream", "sent a stream event without choices"),
        (b"<html>proxy error</html>", "text/html", "returned a reply that is not an event stream (text/html)"),
    ],
)
def test_garbage_stream_fails_at_once_naming_the_endpoint(
    fake_llama: FakeLlama, fast_client, raw: bytes, content_type: str, expected: str
) -> None:
    """Fake server: a 200 whose body is not llama-server's event stream: LlamaServerError, no retry."""
    fake_llama.script(CHAT, Reply(raw=raw, content_type=content_type))
    with fast_client(fake_llama.url) as client, pytest.raises(LlamaServerError) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=64)
    assert not isinstance(err.value, LlamaServerUnavailable)
    assert f"POST {fake_llama.url}/v1/chat/completions {expected}" in str(err.value)
    assert fake_llama.count(CHAT) == 1


@fault
def test_error_events_in_the_stream(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server: an error event after 3 chunks: a 4xx one is the request's fault (not retried), a 5xx one is
    retried like an HTTP 500."""
    rejected = {"error": {"code": 400, "message": "the request exceeds the available context size"}}
    fake_llama.script(CHAT, Reply(error_after=(3, rejected)))
    with fast_client(fake_llama.url) as client, pytest.raises(LlamaRequestRejected) as err:
        client.chat_json(MESSAGES, SCHEMA, max_tokens=64)
    assert err.value.status == 400 and fake_llama.count(CHAT) == 1
    assert "reported an error in its stream after 3 generated token(s)" in str(err.value)
    assert "exceeds the available context size" in str(err.value)

    failed = {"error": {"code": 500, "message": "decode failed"}}
    fake_llama.script(CHAT, Reply(error_after=(1, failed)))
    with fast_client(fake_llama.url) as client:
        result = client.chat_json(MESSAGES, SCHEMA, max_tokens=64)
    assert result.parsed is not None and fake_llama.count(CHAT) == 3


@pytest.fixture
def cpu_hog() -> Iterator[list[subprocess.Popen]]:
    """A busy loop on every core (as many processes as cores), killed after the test."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(30)


# 60 digits: the schema alone makes the model generate ~190 tokens, far longer in all than the stall timeout under
# the hog, which is far longer than the gap between two tokens on a busy machine (up to ~4 s seen here, with the
# hog and four other test runs at once; 0.4 s per token on average).
LONG_SCHEMA = {
    "type": "object",
    "properties": {
        "digits": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "minItems": 60,
            "maxItems": 60,
        }
    },
    "required": ["digits"],
}
STALL_SECONDS = 10.0


@pytest.fixture(scope="module")
def one_thread_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServerProcess]:
    """A real server of its own with THREADS=1. With THREADS=2 (the session server) and a hog on both cores,
    llama.cpp's threads wait for each other at every step of the graph while one is off the CPU: 30 prompt tokens
    took longer than 15 s here. That server would be stalled by any measure, not slow."""
    process = start_embedded(tmp_path_factory.mktemp("one-thread"), {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 1})
    try:
        yield process
    finally:
        process.stop()


@llm
@pytest.mark.slow  # a deliberately long completion on a starved server: 25 s on a quiet machine, 100 s on a busy one
def test_long_completion_under_a_cpu_hog_succeeds_without_a_retry(
    one_thread_server: EmbeddedServerProcess, cpu_hog: list[subprocess.Popen], caplog: pytest.LogCaptureFixture
) -> None:
    """REAL server, every core busy with a hog: a completion that takes longer than the stall timeout (10 s) in all
    but never goes 10 s without a token completes in one request. Before streaming, the same read timeout cut it
    off and retried it, discarding the server's work."""
    caplog.set_level(logging.WARNING, logger="hsi_dagster.llm")
    messages = [{"role": "user", "content": "Write 60 random digits."}]
    assert all(hog.poll() is None for hog in cpu_hog)
    with LlamaClient(one_thread_server.url, read_timeout=STALL_SECONDS, max_tries=1) as client:
        result = client.chat_json(messages, LONG_SCHEMA, max_tokens=1024)
    assert all(hog.poll() is None for hog in cpu_hog)  # the hog ran the whole time
    assert result.parse_error is None, result.content
    assert len(result.parsed["digits"]) == 60
    assert result.finish_reason == "stop"
    # The premise: the whole completion outlasted the stall timeout (a non-streamed read would have timed out).
    assert result.latency_ms / 1000.0 > STALL_SECONDS, result.timings
    assert result.usage.completion_tokens == result.timings["predicted_n"] >= 120
    assert result.usage.prompt_tokens == result.timings["prompt_n"] + result.timings["cache_n"]
    assert _retries(caplog) == []
