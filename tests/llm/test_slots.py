"""The process-wide slot limiter: never more completions in flight than the server has slots, across threads and
clients; its bookkeeping; and the per-server state that reset_server_cache clears."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.llm.slots import (
    SERVERS,
    ServerInfo,
    SlotLimiter,
    reset_server_cache,
    slot_free_count,
    slot_limiter,
    slot_semaphore_size,
)
from tests.support.fake_llama import FakeLlama, Reply
from tests.support.llm_fixtures import RunningLlama
from tests.support.server_watch import ServerWatcher

llm = pytest.mark.llm
fault = pytest.mark.fault

SCHEMA = {"type": "object", "properties": {"risk": {"type": "string"}}, "required": ["risk"]}
MESSAGES = [{"role": "user", "content": "assess"}]


def test_limiter_counts_free_slots_and_refuses_to_over_release():
    limiter = SlotLimiter(2)
    assert limiter.acquire() and limiter.acquire(blocking=False) and limiter.free == 0
    assert not limiter.acquire(timeout=0.01)  # full: a timed wait gives up
    limiter.release()
    assert limiter.free == 1 and repr(limiter) == "SlotLimiter(free=1/2)"
    limiter.release()
    with pytest.raises(ValueError, match="released more often than acquired"):
        limiter.release()
    with pytest.raises(ValueError, match="at least one slot"):
        SlotLimiter(0)


def test_a_waiter_gets_the_slot_another_thread_releases():
    limiter = SlotLimiter(1)
    limiter.acquire()
    got: list[float] = []
    waiter = threading.Thread(target=lambda: got.append(time.monotonic()) if limiter.acquire(timeout=5) else None)
    waiter.start()
    time.sleep(0.05)
    assert not got  # still waiting
    released = time.monotonic()
    limiter.release()
    waiter.join(5)
    assert got and got[0] >= released and limiter.free == 0


def test_one_state_per_normalised_url_sized_once_and_reset():
    url = "http://127.0.0.1:1"
    reset_server_cache(url)
    state = SERVERS.state(url + "/")
    assert state is SERVERS.state(" " + url) and slot_limiter(url) is None and slot_free_count(url) is None
    limiter = state.size_limiter(3)
    assert state.size_limiter(8) is limiter and slot_semaphore_size(url) == 3  # never resized
    state.info = ServerInfo(slot_context=4096, total_slots=3, model="m", chat_template=None, build_info=None)
    state.schema_enforced, state.token_mode = True, "llama"
    reset_server_cache(url)
    assert (state.info, state.limiter, state.schema_enforced, state.token_mode) == (None, None, False, None)
    assert slot_semaphore_size(url) is None


@fault
def test_max_in_flight_respects_slots(fake_llama: FakeLlama, fast_client) -> None:
    """Fake server with 2 slots and slow replies: 6 threads on 3 clients never have more than 2 in flight."""
    from concurrent.futures import ThreadPoolExecutor

    fake_llama.script("/v1/chat/completions", *[Reply(delay=0.2)] * 6)
    clients = [fast_client(fake_llama.url) for _ in range(3)]
    try:
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: clients[i % 3].chat_json(MESSAGES, SCHEMA, max_tokens=8), range(6)))
    finally:
        for client in clients:
            client.close()
    assert all(r.parsed == {"risk": "x"} for r in results)
    assert fake_llama.max_in_flight == 2


LONG_SCHEMA = {
    "type": "object",
    "properties": {"story": {"type": "string", "minLength": 120, "maxLength": 160}},
    "required": ["story"],
}


def ask(topic: str) -> list[dict]:
    return [
        {"role": "system", "content": "You rate security risk. Answer with JSON only."},
        {"role": "user", "content": f"A camera saw: {topic}. Rate the risk."},
    ]


@llm
def test_client_never_exceeds_server_slots(llama_server: RunningLlama) -> None:
    """3 x PARALLEL requests from 6 threads on 3 clients: the server never has more than PARALLEL in flight
    and never defers (queues) a request, because the process-wide semaphore holds the extras back."""
    parallel = llama_server.settings.PARALLEL
    clients = [LlamaClient(llama_server.url) for _ in range(3)]
    try:
        clients[0].ensure_ready()
        with ServerWatcher(llama_server.url) as watcher, ThreadPoolExecutor(3 * parallel) as pool:
            results = list(
                pool.map(
                    lambda i: clients[i % 3].chat_json(ask(f"event {i}"), LONG_SCHEMA, max_tokens=64, seed=i),
                    range(3 * parallel),
                )
            )
    finally:
        for client in clients:
            client.close()
    assert len(results) == 3 * parallel and all(r.usage.completion_tokens > 0 for r in results)
    assert watcher.polls >= 10
    assert watcher.max_processing == parallel  # both slots were used ...
    assert watcher.max_deferred == 0  # ... and nothing waited inside the server


@llm
def test_without_the_semaphore_the_server_queues(llama_server: RunningLlama) -> None:
    """Control for the test above: the same load sent with raw httpx (no client semaphore) makes the server defer
    requests, so the watcher can see the failure the semaphore prevents."""
    parallel = llama_server.settings.PARALLEL
    body = {
        "max_tokens": 64,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": LONG_SCHEMA}},
    }

    def raw(i: int) -> int:
        reply = httpx.post(
            f"{llama_server.url}/v1/chat/completions", json={**body, "messages": ask(f"raw {i}")}, timeout=120
        )
        return reply.status_code

    with ServerWatcher(llama_server.url) as watcher, ThreadPoolExecutor(3 * parallel) as pool:
        statuses = list(pool.map(raw, range(3 * parallel)))
    assert statuses == [200] * (3 * parallel)
    assert watcher.max_processing == parallel
    assert watcher.max_deferred > 0
