"""Several llama-servers behind LLAMA_SERVER_URL (hsi_dagster/llm/router.py).

- The selection policy, as a pure function with fake per-server slot counts.
- Routing, slot bounds, cool-down and failover against FAKE servers (tests/support/fake_llama.py: fault injection
  only).
- Spreading, a server stopped mid-load and its return against TWO REAL embedded llama.cpp servers (1 slot each).
"""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import httpx
import pytest

from hsi_dagster.llm.client import LlamaClient, LlamaServerUnavailable
from hsi_dagster.llm.embedded import EmbeddedServerProcess, free_port
from hsi_dagster.llm.router import LlamaRouter, choose_server
from hsi_dagster.llm.slots import SlotLease
from hsi_dagster.resources import LlamaServerResource
from tests.support.fake_llama import Reply
from tests.support.llm_fixtures import start_embedded

llm = pytest.mark.llm
fault = pytest.mark.fault

SCHEMA = {"type": "object", "properties": {"risk": {"enum": ["low", "medium", "high"]}}, "required": ["risk"]}
REAL_SERVER = {"CTX_SIZE": 4096, "PARALLEL": 1, "THREADS": 1}
SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter, as another Dagster run is


def ask(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "You rate security risk. Answer with JSON only."},
        {"role": "user", "content": f"Camera event number {i}: a person near the gate. Rate the risk."},
    ]


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class FakeClock:
    """Monotonic time the test moves by hand, so cool-downs of 10-60 s take no real time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# --- the policy ---------------------------------------------------------------------------------------------------


def test_choose_server_most_free_slots_then_round_robin() -> None:
    """Most free slots wins; ties rotate from `start`; None (down/tried) and 0 (full) are never chosen."""
    assert choose_server([1, 3, 0]) == 1
    assert [choose_server([2, 2, 2], start) for start in range(4)] == [0, 1, 2, 0]
    assert choose_server([2, None, 2], start=1) == 2
    assert choose_server([None, 0, None]) is None
    assert choose_server([]) is None


def test_policy_with_fake_slot_counts_never_exceeds_a_server() -> None:
    """Fake slot counts 3 and 1 taken one request at a time: picks follow free slots (0, 0, 1, 0), each server gets
    exactly its slot count, and nothing is picked once all are full."""
    free = [3, 1]
    picks, start = [], 0
    while (index := choose_server(free, start)) is not None:
        picks.append(index)
        free[index] -= 1
        start = (index + 1) % len(free)
    assert picks == [0, 0, 1, 0]
    assert free == [0, 0]


# --- routing against FAKE servers (fault injection only) -----------------------------------------------------------


@fault
def test_fake_servers_slots_bounded_per_server_and_all_used(start_fake, fast_client) -> None:
    """FAKE servers with 2 and 1 slots and slow replies, 6 threads: in flight never exceeds a server's slots, every
    slot is used, and every request returns a parsed result."""
    a = start_fake(total_slots=2)
    b = start_fake(total_slots=1)
    for fake in (a, b):
        fake.script("/v1/chat/completions", *[Reply(delay=0.3)] * 8)
    with LlamaRouter([fast_client(a.url), fast_client(b.url)]) as router:
        info = router.ensure_ready()
        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda i: router.chat_json(ask(i), SCHEMA, max_tokens=8), range(6)))
        stats = router.stats()
    assert info.total_slots == 3
    assert all(r.parsed == {"risk": "low"} for r in results)
    assert (a.max_in_flight, b.max_in_flight) == (2, 1)
    assert stats[a.url].max_in_flight == 2 and stats[b.url].max_in_flight == 1
    assert stats[a.url].succeeded + stats[b.url].succeeded == 6 and stats[b.url].succeeded >= 1
    assert {r.server_url for r in results} == {a.url, b.url}


@fault
def test_ensure_ready_reports_smallest_context_and_skips_a_closed_port(start_fake, fast_client) -> None:
    """FAKE servers with 2048- and 4096-token slots plus a closed port: ready anyway, slot_context is the minimum
    (a budget that fits both), total_slots the sum, and the closed port is marked down and never sent a completion."""
    small = start_fake(slot_context=2048, total_slots=1)
    large = start_fake(slot_context=4096, total_slots=2)
    dead = closed_url()
    with LlamaRouter([fast_client(dead), fast_client(large.url), fast_client(small.url)]) as router:
        info = router.ensure_ready()
        results = [router.chat_json(ask(i), SCHEMA, max_tokens=8) for i in range(4)]
        stats = router.stats()
    assert info.slot_context == 2048 and info.total_slots == 3
    assert {r.server_url for r in results} <= {small.url, large.url}
    assert stats[dead].state == "down" and stats[dead].requests == 0
    assert "ConnectError" in (stats[dead].last_error or "")


@fault
def test_all_down_names_every_url(fast_client) -> None:
    """No server listening at all: ensure_ready and chat_json raise LlamaServerUnavailable naming each URL."""
    urls = [closed_url(), closed_url()]
    with LlamaRouter([fast_client(url) for url in urls], startup_timeout=0.3) as router:
        with pytest.raises(LlamaServerUnavailable) as ready_err:
            router.ensure_ready()
        with pytest.raises(LlamaServerUnavailable) as chat_err:
            router.chat_json(ask(0), SCHEMA, max_tokens=8)
    for err in (ready_err, chat_err):
        text = str(err.value)
        assert all(url in text for url in urls), text
    assert "readiness within 0.3 s" in str(ready_err.value)


@fault
def test_cooldown_doubles_up_to_60_s_then_the_server_rejoins(start_fake, fast_client) -> None:
    """FAKE server B answers 503 "Loading model" to its first 4 health checks. With a fake clock: B sits out
    10, 20, 40, then 60 s (capped), requests go to A meanwhile, and after the last cool-down B serves again."""
    a = start_fake()
    b = start_fake()
    b.loading_then_ready(4)
    clock = FakeClock()
    with LlamaRouter([fast_client(a.url), fast_client(b.url)], clock=clock) as router:
        router.ensure_ready()
        cooldowns = [router.stats()[b.url].retry_in_seconds]
        for _ in range(3):
            clock.advance(cooldowns[-1])
            assert router.chat_json(ask(0), SCHEMA, max_tokens=8).server_url == a.url  # B is probed in the background
            wait_for(lambda: router.stats()[b.url].state != "probing", what="B's probe")
            cooldowns.append(router.stats()[b.url].retry_in_seconds)
        assert b.count("/v1/chat/completions") == 0
        clock.advance(cooldowns[-1])
        router.chat_json(ask(1), SCHEMA, max_tokens=8)
        wait_for(lambda: router.stats()[b.url].state == "up", what="B back up")
        servers = {router.chat_json(ask(i), SCHEMA, max_tokens=8).server_url for i in range(4)}
    assert cooldowns == [10.0, 20.0, 40.0, 60.0]
    assert b.count("/health") == 6  # ensure_ready + 3 probes while loading, then the probe and B's own ensure_ready
    assert servers == {a.url, b.url}


@fault
def test_request_on_a_server_that_goes_away_moves_to_the_other(start_fake, fast_client) -> None:
    """FAKE server A starts answering 503 to everything (completions and /health) after start-up, as a server going
    away does: the request that picks it is answered by B (none lost), A is marked down and gets no further request.
    (A real connection refused is covered by the two-real-servers test.)"""
    a = start_fake()
    b = start_fake()
    with LlamaRouter([fast_client(a.url), fast_client(b.url)]) as router:
        router.ensure_ready()
        a.script("/v1/chat/completions", *[Reply(503)] * 10)
        a.script("/health", *[Reply(503)] * 10)
        results = [router.chat_json(ask(i), SCHEMA, max_tokens=8) for i in range(4)]
        wait_for(lambda: router.stats()[a.url].state == "down", what="A marked down")
        stats = router.stats()
    assert all(r.server_url == b.url and r.parsed == {"risk": "low"} for r in results)
    assert stats[a.url].failed == 1 and stats[a.url].requests == 1
    assert a.count("/v1/chat/completions") == 1 + 3  # the schema probe, then one request's 3 tries
    assert stats[b.url].succeeded == 4


@fault
def test_5xx_moves_the_request_but_a_healthy_server_stays_in(start_fake, fast_client) -> None:
    """FAKE server A answers 500 to one request (all 3 tries) while /health is fine: the request is answered by B,
    and A, still healthy, is not marked down (one bad request must not take a server out)."""
    a = start_fake(total_slots=2)  # more free slots: the first request goes to A
    b = start_fake(total_slots=1)
    with LlamaRouter([fast_client(a.url), fast_client(b.url)]) as router:
        router.ensure_ready()
        a.script("/v1/chat/completions", *[Reply(500)] * 3)
        result = router.chat_json(ask(0), SCHEMA, max_tokens=8)
        wait_for(lambda: router.stats()[a.url].state != "probing", what="A's health check")
        stats = router.stats()
    assert result.server_url == b.url and result.parsed == {"risk": "low"}
    assert stats[a.url].failed == 1 and stats[a.url].state == "up"


def _hold_two_completions(url: str, lease_dir: str, verdicts: str) -> None:
    """Another process (a spawned interpreter, as another Dagster run is): its own router over server A alone sends
    two completions at once, holding both of A's slots until the (delayed) replies come."""
    client = LlamaClient(url, slot_lease_dir=lease_dir, probe_cache_dir=verdicts, backoff_base=0.01, startup_timeout=30)
    with LlamaRouter([client]) as router:
        router.ensure_ready()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda i: router.chat_json(ask(i), SCHEMA, max_tokens=8), range(2)))


@fault
def test_router_picks_by_the_slots_free_across_processes(start_fake, fast_client, tmp_path: Path) -> None:
    """FAKE servers A (2 slots) and B (1 slot), fault injection only. Another process's router holds both of A's
    slots with slow completions; this process's router has nothing in flight, so its own counts say A 2 free, B 1.
    Counting the shared leases, A has none free: the request goes to B at once instead of queueing for A."""
    a = start_fake(total_slots=2)
    b = start_fake(total_slots=1)
    leases, verdicts = tmp_path / "leases", tmp_path / "verdicts"
    options = {"slot_lease_dir": str(leases), "probe_cache_dir": verdicts}
    with LlamaRouter([fast_client(a.url, **options), fast_client(b.url, **options)]) as router:
        router.ensure_ready()  # the schema probes pass here and are shared: the other process skips them
        a.script("/v1/chat/completions", Reply(delay=4.0), Reply(delay=4.0))
        other = SPAWN.Process(target=_hold_two_completions, args=(a.url, str(leases), str(verdicts)))
        other.start()
        try:
            a_leases = SlotLease(leases, a.url, 2)
            wait_for(
                lambda: a_leases.held() == 2 or not other.is_alive(),
                timeout=120,  # a spawned interpreter importing Dagster on a loaded 2-core machine
                what="the other process holding both of A's slots",
            )
            assert other.is_alive(), f"the other process ended (exit code {other.exitcode}) before holding A's slots"
            result = router.chat_json(ask(0), SCHEMA, max_tokens=8)
            assert a_leases.held() == 2, "the other process's completions ended first: the test proves nothing"
        finally:
            other.join(60)
            other.kill()
    assert result.server_url == b.url and result.parsed == {"risk": "low"}
    assert other.exitcode == 0
    assert a.max_in_flight == 2 and a.count("/v1/chat/completions") == 1 + 2  # the probe, the other process's two


@fault
def test_single_url_resource_sends_what_it_always_sent(start_fake) -> None:
    """One URL: no router, and ensure_ready sends exactly /health, /props, /slots and the schema probe to a FAKE
    llama-server (no fallback detection requests); two URLs: a router."""
    fake = start_fake()
    single = LlamaServerResource(urls=[fake.url])
    assert single.get_router() is None
    info = single.ensure_ready()
    assert [r.path for r in fake.requests] == ["/health", "/props", "/slots", "/v1/chat/completions"]
    assert info.api == "llama.cpp" and info.missing_endpoints == ()
    assert "cache_prompt" in fake.requests[-1].body and "model" not in fake.requests[-1].body
    router = LlamaServerResource(urls=[fake.url, closed_url()]).get_router()
    assert router is not None and router.urls[0] == fake.url
    router.close()


# --- TWO REAL embedded servers --------------------------------------------------------------------------------------


@dataclass
class TwoServers:
    tmp: Path
    a: EmbeddedServerProcess
    b: EmbeddedServerProcess  # replaced when the test restarts it

    @property
    def urls(self) -> list[str]:
        return [self.a.url, self.b.url]


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoServers]:
    """Two REAL llama.cpp servers (SmolLM2-135M, 1 slot x 4096 tokens, 1 thread each), started in parallel."""
    tmp = tmp_path_factory.mktemp("two")
    a = start_embedded(tmp, REAL_SERVER, wait=False)
    b = start_embedded(tmp, REAL_SERVER, wait=False)
    pair = TwoServers(tmp, a, b)
    try:
        a.wait_until_healthy()
        b.wait_until_healthy()
        yield pair
    finally:
        pair.a.stop()
        pair.b.stop()
        b.stop()


def predicted_tokens(url: str) -> float:
    """llamacpp:tokens_predicted_total from the server's own /metrics (0 for a server that is not answering)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    match = re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.M)
    assert match, "llamacpp:tokens_predicted_total missing from /metrics"
    return float(match.group(1))


def real_router(urls: list[str], **options: float) -> LlamaRouter:
    return LlamaRouter([LlamaClient(url, backoff_base=0.1, startup_timeout=60) for url in urls], **options)


def valid(result) -> bool:
    return result.parse_error is None and result.parsed.get("risk") in ("low", "medium", "high")


@llm
def test_real_servers_share_requests_from_threads(two_servers: TwoServers) -> None:
    """Two REAL 1-slot servers, 6 requests from 3 threads: both serve (router counts AND each server's /metrics),
    neither ever has more than its one slot in flight from this process, and every reply is valid JSON."""
    before = {url: predicted_tokens(url) for url in two_servers.urls}
    with real_router(two_servers.urls) as router:
        info = router.ensure_ready()
        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda i: router.chat_json(ask(i), SCHEMA, max_tokens=16, seed=i), range(6)))
        stats = router.stats()
    assert info.slot_context == 4096 and info.total_slots == 2
    assert all(valid(r) for r in results), [r.content for r in results]
    for url in two_servers.urls:
        assert stats[url].succeeded >= 1 and stats[url].max_in_flight == 1, stats[url]
        assert predicted_tokens(url) > before[url], url
    assert sum(s.succeeded for s in stats.values()) == 6


@llm
def test_real_server_stopped_under_load_loses_nothing_and_returns_after_cooldown(two_servers: TwoServers) -> None:
    """REAL servers A and B under load from 4 threads; B is killed once it has answered one request: all 8
    requests still return valid results, the next 4 go to A only, and B, restarted on the same port, is probed
    after its cool-down (1-2 s here) and serves requests again (its new process's /metrics count them)."""
    a_url, b_url = two_servers.urls
    port = two_servers.b.port
    with real_router(two_servers.urls, cooldown_seconds=1.0, max_cooldown_seconds=2.0) as router:
        router.ensure_ready()

        def stop_b_after_one_answer() -> None:
            wait_for(lambda: router.stats()[b_url].succeeded >= 1, timeout=60, what="B's first answer")
            # SIGTERM, then SIGKILL after 1 s: with a request in flight the server does not exit on SIGTERM alone.
            two_servers.b.stop(timeout=1.0)

        stopper = threading.Thread(target=stop_b_after_one_answer)
        stopper.start()
        with ThreadPoolExecutor(4) as pool:
            under_load = list(pool.map(lambda i: router.chat_json(ask(i), SCHEMA, max_tokens=16, seed=i), range(8)))
        stopper.join(60)
        assert not two_servers.b.running
        after_stop = [router.chat_json(ask(100 + i), SCHEMA, max_tokens=16) for i in range(4)]
        b_requests_while_down = router.stats()[b_url].requests

        two_servers.b = start_embedded(two_servers.tmp, REAL_SERVER, port=port)
        deadline = time.monotonic() + 30
        back = []
        while not any(r.server_url == b_url for r in back):
            assert time.monotonic() < deadline, f"B never served again: {router.stats()[b_url]}"
            back.append(router.chat_json(ask(200 + len(back)), SCHEMA, max_tokens=16))
        stats = router.stats()
    assert len(under_load) == 8 and all(valid(r) for r in under_load), [r.content for r in under_load]
    assert all(r.server_url == a_url and valid(r) for r in after_stop)
    assert stats[b_url].requests == b_requests_while_down + 1  # the first request after its return
    assert stats[b_url].state == "up" and predicted_tokens(b_url) > 0
    assert all(valid(r) for r in back)


@llm
def test_resource_with_two_real_urls_routes_inside_a_run(two_servers: TwoServers) -> None:
    """LlamaServerResource with "A,B" in a real materialization: ensure_ready, exact token count and 4 completions
    from 2 threads, answered by both servers; teardown closes every client."""

    seen_clients: list[LlamaClient] = []

    @dg.asset
    def spread(llm: LlamaServerResource) -> dict:
        info = llm.ensure_ready()
        counted = llm.count_prompt_tokens(ask(0))
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda i: llm.chat_json(ask(i), SCHEMA, max_tokens=16, seed=i), range(4)))
        router = llm.get_router()
        assert router is not None
        seen_clients.extend(router.clients)
        return {
            "slot_context": info.slot_context,
            "counted": counted,
            "servers": sorted({r.server_url for r in results}),
            "valid": all(valid(r) for r in results),
        }

    resource = LlamaServerResource(urls=two_servers.urls, max_output_tokens=16)
    outcome = dg.materialize([spread], resources={"llm": resource})
    assert outcome.success
    value = outcome.output_for_node("spread")
    assert value["slot_context"] == 4096 and value["counted"] > 20 and value["valid"]
    assert value["servers"] == sorted(two_servers.urls)
    assert len(seen_clients) == 2 and all(client.closed for client in seen_clients)
