"""Several llama-servers behind one client: each chat request goes to the server with the most free slots.

Pure Python (no Dagster import): the Dagster resource builds one `LlamaRouter` when LLAMA_SERVER_URL lists several
URLs. Why each rule exists:
- Free slots, not plain round robin: a request sent to a busy server queues inside it while another server idles.
  "Free" counts every process: the server's cross-process slot leases (flock files in HSI_SLOT_LEASE_DIR,
  `hsi_dagster.llm.slots.SlotLease`) that no process holds, bounded by this process's `SlotLimiter` (shared with
  every `LlamaClient` of that URL in this process). The router takes the chosen server's lease before it sends, so
  two processes choosing at once cannot both take its last slot: the one that loses chooses again. Ties go round
  robin from a random start, so separate processes (one per Dagster step) do not all pick server 0. While every
  slot is held, the router waits for a release in this process (notified at once) or polls the leases (5-50 ms).
- Down servers are skipped: a failed connect/health check marks a server down for a cool-down (10 s, doubling up
  to 60 s); after it, a background probe (one /health, then the usual ensure_ready) lets it back in.
- No request is lost: a completion that fails with `LlamaServerUnavailable` is sent to another server (each server
  at most once per request); only when none is left does the caller get `LlamaServerUnavailable` naming every URL.
- `ensure_ready` is satisfied by ONE ready server, and reports the SMALLEST per-slot context of the ready servers
  so a prompt budget fits wherever the request lands.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

from hsi_dagster.llm.client import ChatResult, LlamaClient
from hsi_dagster.llm.errors import LlamaServerError, LlamaServerUnavailable
from hsi_dagster.llm.protocol import ChatOptions
from hsi_dagster.llm.slots import SLOTS_CHANGED, ServerInfo, SlotLease, SlotLimiter, slot_limiter
from hsi_dagster.llm.transport import ClosesOnExit

logger = logging.getLogger("hsi_dagster.llm.router")

COOLDOWN_SECONDS = 10.0
MAX_COOLDOWN_SECONDS = 60.0
# While every slot is held: how often the leases other processes may release are looked at again (doubling).
_LEASE_POLL_FIRST = 0.005
_LEASE_POLL_MAX = 0.05
_T = TypeVar("_T")


def choose_server(free_slots: Sequence[int | None], start: int = 0) -> int | None:
    """Index of the server with the most free slots; ties go to the first at or after `start` (round robin).

    None marks a server that may not be used now (down, already tried); None is returned when nothing is free.
    """
    best = max((free for free in free_slots if free is not None), default=0)
    if best <= 0:
        return None
    count = len(free_slots)
    for step in range(count):
        index = (start + step) % count
        if free_slots[index] == best:
            return index
    return None  # unreachable


@dataclass(frozen=True)
class ServerStats:
    """One server as the router sees it (a snapshot)."""

    url: str
    state: str  # "up", "down" (cooling down, or due for a probe), "probing", "unknown" (not probed yet)
    requests: int  # completions sent to it
    succeeded: int
    failed: int  # failed with LlamaServerUnavailable (and then sent elsewhere)
    in_flight: int
    max_in_flight: int
    consecutive_failures: int
    retry_in_seconds: float | None
    last_error: str | None


# what ServerStats copies from _Server as it stands (the other stats are derived when the snapshot is taken)
_KEPT_AS_IS = ("url", "requests", "succeeded", "failed", "in_flight", "max_in_flight", "last_error")


class _Server:
    def __init__(self, index: int, client: LlamaClient) -> None:
        self.index = index
        self.client = client
        self.url = client.base_url
        self.info: ServerInfo | None = None
        self.ready = False
        self.down_until: float | None = None
        self.failures = 0
        self.probing = False
        self.last_error: str | None = None
        self.requests = self.succeeded = self.failed = 0
        self.in_flight = self.max_in_flight = 0
        self._lease: SlotLease | None = None

    def lease(self, size: int) -> SlotLease:
        """The server's cross-process leases, one per slot (remade when a restarted server has another size)."""
        if self._lease is None or self._lease.size != size:
            self._lease = SlotLease(self.client.slot_lease_dir, self.url, size)
        return self._lease

    def free_slots(self, limiter: SlotLimiter) -> int:
        """Slots free across every process: leases nobody holds, at most what this process's limiter allows."""
        if limiter.free <= 0:
            return 0
        lease = self.lease(limiter.size)
        return min(limiter.free, lease.size - lease.held())

    def take_slot(self, limiter: SlotLimiter) -> int | None:
        """This process's slot and a cross-process lease (its descriptor); None when another process was faster.
        Call with SLOTS_CHANGED held."""
        if not limiter.acquire(blocking=False):
            return None
        try:
            fd = self.lease(limiter.size).try_acquire()
        except BaseException:
            limiter.release()
            raise
        if fd is None:
            limiter.release()
        return fd


class LlamaRouter(ClosesOnExit):
    """Routes `chat_json` over several `LlamaClient`s by free slots, skipping servers that are down.

    Thread-safe. Same call shapes as `LlamaClient` for what the pipeline uses: ensure_ready, server_info,
    chat_json, count_prompt_tokens, prompt_token_ids, close. All state is guarded by slots.SLOTS_CHANGED.
    """

    def __init__(
        self,
        clients: Sequence[LlamaClient],
        *,
        cooldown_seconds: float = COOLDOWN_SECONDS,
        max_cooldown_seconds: float = MAX_COOLDOWN_SECONDS,
        startup_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not clients:
            raise ValueError("LlamaRouter needs at least one client")
        urls = [client.base_url for client in clients]
        if len(set(urls)) != len(urls):
            raise ValueError(f"LlamaRouter got the same URL twice: {urls}")
        self.clients = list(clients)
        self.cooldown_seconds = float(cooldown_seconds)
        self.max_cooldown_seconds = max(float(max_cooldown_seconds), self.cooldown_seconds)
        self.startup_timeout = (
            max(client.startup_timeout for client in clients) if startup_timeout is None else float(startup_timeout)
        )
        self._clock = clock
        self._servers = [_Server(index, client) for index, client in enumerate(clients)]
        self._next = random.randrange(len(self._servers))  # round-robin pointer; random so processes differ

    @classmethod
    def from_urls(cls, urls: Sequence[str], *, router_options: dict | None = None, **client_kwargs: Any) -> LlamaRouter:
        """One LlamaClient per URL (HsiSettings.llm_urls is the one parse of LLAMA_SERVER_URL)."""
        return cls([LlamaClient(url, **client_kwargs) for url in urls], **(router_options or {}))

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self._servers]

    def __repr__(self) -> str:
        return f"LlamaRouter({self.urls!r})"

    def close(self) -> None:
        for client in self.clients:
            client.close()

    # --- server state -------------------------------------------------------------------------------------------------
    def _cooldown(self, failures: int) -> float:
        return min(self.cooldown_seconds * (2 ** max(0, failures - 1)), self.max_cooldown_seconds)

    def _mark_down(self, server: _Server, problem: object) -> None:
        with SLOTS_CHANGED:
            server.failures += 1
            server.ready = False
            wait = self._cooldown(server.failures)
            server.down_until = self._clock() + wait
            server.last_error = str(problem)
            SLOTS_CHANGED.notify_all()
        level = logging.WARNING if server.failures == 1 else logging.DEBUG  # warn when it goes down, not per retry
        logger.log(level, "llama-server %s is down (%s); next try in %.0f s", server.url, problem, wait)

    def _mark_up(self, server: _Server, info: ServerInfo) -> None:
        with SLOTS_CHANGED:
            was_down = server.down_until is not None
            server.info = info
            server.ready = True
            server.down_until = None
            server.failures = 0
            server.last_error = None
            SLOTS_CHANGED.notify_all()
        if was_down:
            logger.info("llama-server %s is back", server.url)

    def _limiter_if_up(self, server: _Server) -> SlotLimiter | None:
        """The server's slot limiter when it is ready and not cooling down (a reset limiter means: probe again)."""
        if not server.ready or server.down_until is not None:
            return None
        return slot_limiter(server.url)

    def _probe(self, server: _Server) -> None:
        """One health check (no waiting), then ensure_ready (cached per process after the first success).

        Unreachable or still loading: marked down. A server that answers but is unusable (schema not enforced,
        key rejected) raises: that is configuration to fix, not an outage to route around.
        """
        try:
            server.client.wait_until_ready(timeout=0)
            info = server.client.ensure_ready()
        except LlamaServerUnavailable as exc:
            self._mark_down(server, exc)
        else:
            self._mark_up(server, info)
        finally:
            with SLOTS_CHANGED:
                server.probing = False
                SLOTS_CHANGED.notify_all()

    def _probe_or_mark_down(self, server: _Server) -> None:
        """A probe on behalf of requests (background): a server unusable for any reason sits out a cool-down."""
        try:
            self._probe(server)
        except LlamaServerError as exc:
            logger.error("llama-server %s is unusable: %s", server.url, exc)
            self._mark_down(server, exc)

    def _check_health(self, server: _Server) -> None:
        """After a failed request: down if /health fails too. A server that answers /health stays up (the request
        itself may be what fails there); the request moves on either way."""
        try:
            server.client.wait_until_ready(timeout=0)
        except LlamaServerError as exc:
            self._mark_down(server, exc)
        finally:
            with SLOTS_CHANGED:
                server.probing = False
                SLOTS_CHANGED.notify_all()

    def _start_probe(self, server: _Server, target: Callable[[_Server], None]) -> None:
        """Run `target` in a daemon thread; the server is out of selection (probing) until it finishes.
        Call with SLOTS_CHANGED held."""

        def run() -> None:
            try:
                target(server)
            except Exception as exc:  # e.g. the router was closed meanwhile: never die silently with probing set
                logger.debug("probe of %s ended with %r", server.url, exc)
                with SLOTS_CHANGED:
                    server.probing = False
                    SLOTS_CHANGED.notify_all()

        server.probing = True
        threading.Thread(target=run, name=f"llama-probe-{server.index}", daemon=True).start()

    def _all_down_error(self, tried: dict[str, str], what: str) -> LlamaServerUnavailable:
        now = self._clock()
        parts = []
        for server in self._servers:
            if server.url in tried:
                parts.append(f"{server.url} (failed: {tried[server.url]})")
            elif server.down_until is not None:
                parts.append(
                    f"{server.url} (down, next try in {max(0.0, server.down_until - now):.0f} s: {server.last_error})"
                )
            else:
                parts.append(f"{server.url} (not ready: {server.last_error or 'not probed yet'})")
        return LlamaServerUnavailable(f"no llama-server available for {what}: " + "; ".join(parts))

    # --- choosing a server --------------------------------------------------------------------------------------------
    def _pick(
        self, tried: dict[str, str], what: str, *, take_slot: bool
    ) -> tuple[_Server, SlotLimiter | None, int | None]:
        """The usable server with the most slots free across processes, ties round robin; with take_slot, one of
        its slots is taken (this process's limiter and a cross-process lease, whose descriptor is returned).

        Servers never probed, past their cool-down, or whose limiter was reset are probed in the background and
        join once ready. While every usable server is full, wait for a release; with none usable and no probe
        running, raise LlamaServerUnavailable naming every URL.
        """
        poll = _LEASE_POLL_FIRST
        while True:
            with SLOTS_CHANGED:
                now = self._clock()
                free: list[int | None] = []
                limiters: list[SlotLimiter | None] = []
                next_expiry: float | None = None
                for server in self._servers:
                    limiter = None
                    if server.url in tried or server.probing:
                        pass
                    elif server.down_until is not None and now < server.down_until:
                        next_expiry = server.down_until if next_expiry is None else min(next_expiry, server.down_until)
                    else:
                        limiter = self._limiter_if_up(server)
                        if limiter is None:
                            self._start_probe(server, self._probe_or_mark_down)
                    limiters.append(limiter)
                    free.append(server.free_slots(limiter) if limiter else None)
                if not take_slot:
                    index = choose_server(free, self._next)
                    if index is None and any(limiters):
                        index = choose_server([None if f is None else f + 1 for f in free], self._next)  # all busy
                    if index is not None:
                        self._next = (index + 1) % len(self._servers)
                        return self._servers[index], limiters[index], None
                while (index := choose_server(free, self._next)) is not None:
                    server, limiter = self._servers[index], limiters[index]
                    assert limiter is not None  # choose_server picks servers with free slots only
                    fd = server.take_slot(limiter)
                    if fd is None:  # another process took the last lease between the count and now
                        free[index] = 0
                        continue
                    server.requests += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    self._next = (index + 1) % len(self._servers)
                    return server, limiter, fd
                probing = any(s.probing for s in self._servers if s.url not in tried)
                if not probing and not any(limiters):
                    raise self._all_down_error(tried, what)
                # Full, or a probe is running: wait for a release here (notified), one in another process (polled),
                # a probe result, or the end of a cool-down.
                timeout = 1.0 if next_expiry is None else min(1.0, max(0.01, next_expiry - now))
                if any(limiters):
                    timeout = min(timeout, poll)
                    poll = min(poll * 2, _LEASE_POLL_MAX)
                SLOTS_CHANGED.wait(timeout)

    def _release(self, server: _Server, limiter: SlotLimiter, *, ok: bool) -> None:
        with SLOTS_CHANGED:
            server.in_flight -= 1
            if ok:
                server.succeeded += 1
            else:
                server.failed += 1
            limiter.release()  # notifies waiters

    def _failed_on(self, server: _Server, tried: dict[str, str], problem: LlamaServerUnavailable) -> None:
        tried[server.url] = str(problem)
        logger.warning("request failed on %s (%s); trying another server", server.url, problem)
        with SLOTS_CHANGED:
            if not server.probing and server.down_until is None:
                self._start_probe(server, self._check_health)

    # --- public API ---------------------------------------------------------------------------------------------------
    def chat_json(
        self, messages: list[dict], schema: dict, *, max_tokens: int, **options: Unpack[ChatOptions]
    ) -> ChatResult:
        """LlamaClient.chat_json on the server with the most free slots; moved to another one if that one fails.
        `ChatResult.server_url` says which server answered."""
        tried: dict[str, str] = {}
        while True:
            server, limiter, lease = self._pick(tried, "a chat completion", take_slot=True)
            assert limiter is not None
            ok = False
            try:
                result = server.client.chat_json(
                    messages, schema, max_tokens=max_tokens, reserved_lease=lease, **options
                )
                ok = True
            except LlamaServerUnavailable as exc:
                failure = exc
            finally:
                self._release(server, limiter, ok=ok)
            if ok:
                return result
            self._failed_on(server, tried, failure)

    def _on_any(self, what: str, call: Callable[[LlamaClient], _T]) -> _T:
        """`call` on a usable server (no slot taken: it runs no inference), moving on when one is unavailable."""
        tried: dict[str, str] = {}
        while True:
            server, _, _ = self._pick(tried, what, take_slot=False)
            try:
                return call(server.client)
            except LlamaServerUnavailable as exc:
                self._failed_on(server, tried, exc)

    def count_prompt_tokens(self, messages: list[dict]) -> int:
        """Exact prompt tokens from one usable server (all serve the same model)."""
        return self._on_any("counting prompt tokens", lambda client: client.count_prompt_tokens(messages))

    def prompt_token_ids(self, messages: list[dict]) -> list[int]:
        return self._on_any("tokenizing a prompt", lambda client: client.prompt_token_ids(messages))

    def ensure_ready(self) -> ServerInfo:
        """At least one server ready, waiting up to startup_timeout for the first; servers never probed are probed
        at once (in parallel). Returns the first ready server's info with the SMALLEST per-slot context of the ready
        servers (a budget that fits every one) and the SUM of their slots. A reachable server that is unusable
        (SchemaNotEnforced, rejected key) raises, as with one server."""
        deadline = self._clock() + self.startup_timeout
        delay = 0.05
        while True:
            with SLOTS_CHANGED:
                ready_now = self._ready_infos()
                waiting = [s for s in self._servers if not s.probing and self._limiter_if_up(s) is None]
                # Once one server is ready, only never-probed servers are probed here; the rest wait for cool-down.
                to_probe = [s for s in waiting if s.info is None and s.last_error is None] if ready_now else waiting
                for server in to_probe:
                    server.probing = True
            if to_probe:
                with ThreadPoolExecutor(len(to_probe), thread_name_prefix="llama-probe") as pool:
                    errors = [exc for exc in pool.map(self._probe_capture, to_probe) if exc is not None]
                if errors:
                    raise errors[0]
            infos = self._ready_infos()
            if infos:
                return self._aggregate(infos)
            if self._clock() >= deadline:
                raise self._all_down_error({}, f"readiness within {self.startup_timeout:g} s")
            with SLOTS_CHANGED:
                SLOTS_CHANGED.wait(delay)  # a probe by another thread may finish first
            delay = min(delay * 2, 1.0)

    def _probe_capture(self, server: _Server) -> LlamaServerError | None:
        try:
            self._probe(server)
        except LlamaServerError as exc:
            self._mark_down(server, exc)
            return exc
        return None

    def _ready_infos(self) -> list[ServerInfo]:
        with SLOTS_CHANGED:
            return [s.info for s in self._servers if s.info is not None and self._limiter_if_up(s) is not None]

    def _aggregate(self, infos: list[ServerInfo]) -> ServerInfo:
        models = {info.model for info in infos}
        if len(models) > 1:
            logger.warning("llama-servers serve different models %s: budgets assume one tokenizer", sorted(models))
        smallest = min(info.slot_context for info in infos)
        return dataclasses.replace(
            infos[0],
            slot_context=smallest,
            total_slots=sum(info.total_slots for info in infos),
            # reported by a server unless only configured fallbacks are that small
            slot_context_configured=all(i.slot_context_configured for i in infos if i.slot_context == smallest),
        )

    def server_info(self) -> ServerInfo:
        """Live /props of every server at once; unreachable ones are skipped (and marked down). Aggregated as in
        ensure_ready; LlamaServerUnavailable naming every URL when none answers."""

        def ask(server: _Server) -> ServerInfo | LlamaServerUnavailable:
            try:
                return server.client.server_info()
            except LlamaServerUnavailable as exc:
                return exc

        with ThreadPoolExecutor(len(self._servers), thread_name_prefix="llama-info") as pool:
            answers = list(pool.map(ask, self._servers))
        infos, failed = [], {}
        for server, answer in zip(self._servers, answers, strict=True):
            if isinstance(answer, ServerInfo):
                infos.append(answer)
            else:
                failed[server.url] = str(answer)
                self._mark_down(server, answer)
        if not infos:
            raise self._all_down_error(failed, "server info")
        return self._aggregate(infos)

    def stats(self) -> dict[str, ServerStats]:
        """Per-URL counters and state, for tests, logs and metrics."""
        with SLOTS_CHANGED:
            now = self._clock()
            out = {}
            for s in self._servers:
                if s.probing:
                    state = "probing"
                elif s.down_until is not None:
                    state = "down"
                else:
                    state = "up" if self._limiter_if_up(s) else "unknown"
                retry_in = round(max(0.0, s.down_until - now), 3) if s.down_until is not None else None
                kept = {name: getattr(s, name) for name in _KEPT_AS_IS}
                out[s.url] = ServerStats(
                    **kept, state=state, consecutive_failures=s.failures, retry_in_seconds=retry_in
                )
            return out
