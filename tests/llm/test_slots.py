"""The process-wide slot limiter: never more completions in flight than the server has slots, across threads and
clients; its bookkeeping; the per-server state that reset_server_cache clears; and the cross-process slot lease
(several real processes, a SIGKILLed holder, clients in two processes on the real server)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.llm.slots import (
    SERVERS,
    ServerInfo,
    ServerSlot,
    SlotLease,
    SlotLeaseError,
    SlotLimiter,
    default_lease_dir,
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
        # The last of the queued requests waits for two rounds of the others: minutes on a loaded 2-core machine.
        reply = httpx.post(
            f"{llama_server.url}/v1/chat/completions", json={**body, "messages": ask(f"raw {i}")}, timeout=600
        )
        return reply.status_code

    with ServerWatcher(llama_server.url) as watcher, ThreadPoolExecutor(3 * parallel) as pool:
        statuses = list(pool.map(raw, range(3 * parallel)))
    assert statuses == [200] * (3 * parallel)
    assert watcher.max_processing == parallel
    assert watcher.max_deferred > 0


# --- the cross-process slot lease -------------------------------------------------------------------------------------
LEASE_URL = "http://127.0.0.1:18091"
SPAWN = multiprocessing.get_context("spawn")  # fresh interpreters, as separate Dagster runs and CLIs are


def _hold_leases(directory: str, size: int, rounds: int, holders, peak, lock, start) -> None:
    """A separate process: take a lease `rounds` times, counting the holders (shared Values) while holding it."""
    lease = SlotLease(directory, LEASE_URL, size)
    start.wait(30)
    for _ in range(rounds):
        fd = lease.acquire(timeout=30)
        assert fd is not None, "no lease within 30 s"
        with lock:
            holders.value += 1
            peak.value = max(peak.value, holders.value)
        time.sleep(0.03)
        with lock:
            holders.value -= 1
        SlotLease.release(fd)


def test_lease_never_has_more_holders_than_slots_across_processes(tmp_path: Path) -> None:
    """6 processes x 5 rounds on 2 leases: at most 2 holders at any moment, and both leases are used."""
    holders, peak, lock, start = SPAWN.Value("i", 0), SPAWN.Value("i", 0), SPAWN.Lock(), SPAWN.Event()
    workers = [
        SPAWN.Process(target=_hold_leases, args=(str(tmp_path), 2, 5, holders, peak, lock, start)) for _ in range(6)
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0] * 6
    assert peak.value == 2 and holders.value == 0
    assert SlotLease(tmp_path, LEASE_URL, 2).held() == 0  # all given back


def _hold_forever(directory: str, size: int, taken) -> None:
    fd = SlotLease(directory, LEASE_URL, size).acquire(timeout=30)
    assert fd is not None
    taken.set()
    time.sleep(600)


def test_a_sigkilled_holder_frees_its_slot(tmp_path: Path) -> None:
    """The kernel drops a dead process's flock: the slot comes back without any reclaim step."""
    taken = SPAWN.Event()
    holder = SPAWN.Process(target=_hold_forever, args=(str(tmp_path), 1, taken))
    holder.start()
    try:
        assert taken.wait(30), "the holder did not get the lease"
        lease = SlotLease(tmp_path, LEASE_URL, 1)
        assert lease.held() == 1 and lease.try_acquire() is None
        assert lease.acquire(timeout=0.2) is None  # a bounded wait gives up while it is held
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        fd = lease.acquire(timeout=10)
        assert fd is not None
        SlotLease.release(fd)
    finally:
        holder.kill()
        holder.join(10)


def test_lease_files_are_per_url_and_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    one, other = SlotLease(tmp_path, LEASE_URL, 1), SlotLease(tmp_path, LEASE_URL + "/", 1)
    assert one.path(0) == other.path(0) and one.path(0).name.startswith("127.0.0.1_18091-")
    assert SlotLease(tmp_path, "http://127.0.0.1:18092", 1).path(0) != one.path(0)
    fd = one.try_acquire()
    assert fd is not None
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(other.acquire(timeout=5)))
    waiter.start()
    time.sleep(0.1)
    assert not got  # another thread's open file: flock excludes it too
    SlotLease.release(fd)
    waiter.join(5)
    assert got and got[0] is not None
    SlotLease.release(got[0])
    assert SlotLease(None, LEASE_URL, 1).directory == default_lease_dir()


def test_unusable_lease_directory_names_the_setting_and_frees_the_limiter(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    limiter = SlotLimiter(1)
    slot = ServerSlot(limiter, SlotLease(not_a_dir / "leases", LEASE_URL, 1))
    with pytest.raises(SlotLeaseError, match="HSI_SLOT_LEASE_DIR"), slot:
        pass
    assert limiter.free == 1  # the in-process slot taken first was given back


def test_server_slot_holds_limiter_and_lease_and_can_be_entered_again(tmp_path: Path) -> None:
    limiter, lease = SlotLimiter(1), SlotLease(tmp_path, LEASE_URL, 1)
    slot = ServerSlot(limiter, lease)
    for _ in range(2):  # the transport enters it once per try
        with slot:
            assert limiter.free == 0 and lease.held() == 1
        assert limiter.free == 1 and lease.held() == 0
    with ServerSlot(None, lease):  # the router holds the limiter itself: only the lease here
        assert limiter.free == 1 and lease.held() == 1


def _client_burst(url: str, directory: str, threads: int, out) -> None:
    """A separate process with its own client (its own in-process limiter): `threads` completions at once."""
    with LlamaClient(url, slot_lease_dir=directory) as client:
        client.ensure_ready()
        with ThreadPoolExecutor(threads) as pool:
            results = list(
                pool.map(
                    lambda i: client.chat_json(ask(f"event {os.getpid()} {i}"), LONG_SCHEMA, max_tokens=48, seed=i),
                    range(threads),
                )
            )
    out.put(sum(r.usage.completion_tokens > 0 for r in results))


@llm
def test_clients_in_separate_processes_share_the_servers_slots(llama_server: RunningLlama, tmp_path: Path) -> None:
    """2 processes x PARALLEL threads: each process's limiter alone would allow 2 x PARALLEL in flight; with the
    lease the server never has more than PARALLEL, so it defers (queues) nothing."""
    parallel = llama_server.settings.PARALLEL
    out = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=_client_burst, args=(llama_server.url, str(tmp_path), parallel, out)) for _ in range(2)
    ]
    with ServerWatcher(llama_server.url) as watcher:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(180)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert sorted(out.get(timeout=5) for _ in workers) == [parallel, parallel]
    assert watcher.max_processing == parallel
    assert watcher.max_deferred == 0
