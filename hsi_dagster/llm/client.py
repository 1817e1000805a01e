"""The only way the project talks to llama-server: `LlamaClient`, a small synchronous client for one base URL.

Pure Python (no Dagster import) so the CLI, the embedded server, tests and the Dagster resource share it.
It composes the parts that each have one job:
- `transport`: httpx, timeouts, retries with back-off on connection errors/timeouts/5xx, errors naming the
  endpoint and never the API key; completions are streamed, so their read timeout measures a stalled server (no
  token, no prompt progress), never the length of a generation;
- `slots`: what this process knows about each server (the slot limiter that keeps completions in flight at or
  below the server's slots across every thread and client, the cached readiness, the schema-probe verdict) and the
  cross-process slot lease every completion holds, so all processes together stay within the server's slots;
- `openai_compat`: the fallback for OpenAI-compatible servers without /props (vLLM).
`ensure_ready` (health, per-slot context, JSON-schema enforcement probe) runs once per process per base URL; a
passed probe is shared with later processes through `probe_cache_dir` (probe_cache.py).
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path
from typing import Unpack

from hsi_dagster.llm import probe_cache
from hsi_dagster.llm.errors import (
    START_HINT,
    LlamaRequestRejected,
    LlamaServerError,
    LlamaServerNotRunning,
    LlamaServerUnavailable,
    SchemaNotEnforced,
    TokenCountUnavailable,
)
from hsi_dagster.llm.openai_compat import OpenAICompat
from hsi_dagster.llm.protocol import (
    NO_THINKING,
    ChatResult,
    ChatStream,
    ModelIdentity,
    Usage,
    chat_body,
    chat_result,
    model_identity_from_models,
    server_info_from_props,
)
from hsi_dagster.llm.slots import (
    API_LLAMA,
    API_OPENAI,
    SERVERS,
    SLOTS_CHANGED,
    TOKENS_LLAMA,
    TOKENS_NONE,
    TOKENS_OPENAI,
    ServerInfo,
    ServerSlot,
    SlotLease,
    SlotLimiter,
    reset_server_cache,
    slot_free_count,
    slot_limiter,
    slot_semaphore_size,
)
from hsi_dagster.llm.transport import MISSING, ClosesOnExit, Transport, TransportOptions

__all__ = [
    "API_LLAMA",
    "API_OPENAI",
    "SLOTS_CHANGED",
    "ChatResult",
    "LlamaClient",
    "LlamaRequestRejected",
    "LlamaServerError",
    "LlamaServerNotRunning",
    "LlamaServerUnavailable",
    "SchemaNotEnforced",
    "ServerInfo",
    "SlotLimiter",
    "TokenCountUnavailable",
    "Usage",
    "reset_server_cache",
    "slot_free_count",
    "slot_limiter",
    "slot_semaphore_size",
]

logger = logging.getLogger("hsi_dagster.llm")

_READY_PROBE_SECONDS = 10.0  # read timeout of one readiness probe


class LlamaClient(ClosesOnExit):
    """Synchronous client for one llama-server base URL. Thread-safe; share it or make many."""

    def __init__(
        self,
        base_url: str,
        *,
        startup_timeout: float = 300.0,
        refused_timeout: float | None = None,
        fallback_total_slots: int | None = None,
        fallback_slot_context: int | None = None,
        slot_lease_dir: str | None = None,  # HSI_SLOT_LEASE_DIR; None = slots.default_lease_dir()
        probe_cache_dir: str | Path | None = None,  # shared schema-probe verdicts (probe_cache.py); None = not shared
        **http: Unpack[TransportOptions],  # api_key, timeouts, retries: Transport's, with its defaults
    ) -> None:
        """fallback_*: only for OpenAI-compatible servers without /props (vLLM): slots in flight, and the context
        when /v1/models lacks max_model_len.

        refused_timeout: how long readiness waits while the connection is REFUSED (nothing listens) before raising
        LlamaServerNotRunning; None = startup_timeout (for callers that have just spawned the server). A server
        that is up but loading (503) is waited for up to startup_timeout either way."""
        self._transport = Transport(base_url, **http)
        self.base_url = self._transport.base_url
        self.startup_timeout = float(startup_timeout)
        self.refused_timeout = self.startup_timeout if refused_timeout is None else float(refused_timeout)
        self._state = SERVERS.state(self.base_url)
        self._compat = OpenAICompat(
            self._transport, self._state, total_slots=fallback_total_slots, slot_context=fallback_slot_context
        )
        self.slot_lease_dir = slot_lease_dir
        self.probe_cache_dir = Path(probe_cache_dir) if probe_cache_dir else None

    def __repr__(self) -> str:  # never show the key
        return f"LlamaClient({self.base_url!r}, api_key={'***' if self._transport.has_api_key else None})"

    def close(self) -> None:
        self._transport.close()

    @property
    def closed(self) -> bool:
        return self._transport.closed

    def _slot_limiter(self) -> SlotLimiter:
        """This URL's process-wide limiter, sized from the server on first use if ensure_ready has not run."""
        limiter = self._state.limiter
        if limiter is None:
            limiter = self._state.size_limiter(self.server_info().total_slots)
            logger.debug("in-process limit for %s: %d request(s) in flight", self.base_url, limiter.size)
        return limiter

    def slot_lease(self) -> SlotLease:
        """This server's cross-process leases, as many as it has slots (in slot_lease_dir)."""
        return SlotLease(self.slot_lease_dir, self.base_url, self._slot_limiter().size)

    def _server_slot(self, reserved_lease: int | None) -> ServerSlot:
        """What one completion holds: this process's limiter and one of the server's cross-process leases; with
        `reserved_lease` the caller holds the limiter and that lease already."""
        if reserved_lease is not None:
            return ServerSlot(None, self.slot_lease(), held=reserved_lease)
        return ServerSlot(self._slot_limiter(), self.slot_lease())

    # --- readiness and server facts ---------------------------------------------------------------------------------
    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Poll GET /health until 200; 503 "Loading model" means wait (up to startup_timeout, or `timeout` seconds:
        0 = one probe). Connection refused for refused_timeout seconds raises LlamaServerNotRunning (nothing is
        starting there: fail fast). No /health (404, e.g. an OpenAI-compatible server): GET /v1/models."""
        limit = self.startup_timeout if timeout is None else max(0.0, float(timeout))
        started = time.monotonic()
        deadline = started + limit
        refused_deadline = started + min(limit, self.refused_timeout)
        path = "/v1/models" if self._state.api == API_OPENAI else "/health"
        where = self._transport.where("GET", path)
        step = 0
        while True:
            status, text, refused = self._transport.probe(path, _READY_PROBE_SECONDS)
            if status == 200:
                logger.debug("%s: ready", where)
                return
            if status in MISSING and path == "/health":
                logger.info("%s: %s; readiness from GET /v1/models instead", where, status)
                path = "/v1/models"
                where = self._transport.where("GET", path)
                continue
            if status is not None and 400 <= status < 500:
                raise LlamaRequestRejected(f"{where} was rejected with HTTP {status}: {text}", status=status)
            last_problem = text if status is None else f"HTTP {status}: {text}"
            if refused and time.monotonic() >= refused_deadline:
                waited = time.monotonic() - started
                raise LlamaServerNotRunning(
                    f"no llama-server at {self.base_url}: {where} was refused for {waited:.1f} s ({last_problem}); "
                    f"{START_HINT}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LlamaServerUnavailable(
                    f"llama-server at {self.base_url} was not ready within {limit:g} s "
                    f"(last answer from {where}: {last_problem})"
                )
            logger.debug("%s: not ready yet (%s)", where, last_problem)
            time.sleep(min(max(0.02, self._transport.backoff_base * (2**step)), 1.0, remaining))
            step += 1

    def server_info(self) -> ServerInfo:
        """Per-slot context and slot count from /props, cross-checked against /slots when it is enabled."""
        if self._state.api == API_OPENAI:
            return self._compat.server_info()
        where = self._transport.where("GET", "/props")
        try:
            props = self._transport.call("GET", "/props")
        except LlamaRequestRejected as exc:
            if exc.status not in MISSING:
                raise
            logger.info("%s: HTTP %s; treating %s as an OpenAI-compatible server", where, exc.status, self.base_url)
            self._state.api = API_OPENAI
            return self._compat.server_info()
        if not isinstance(props, dict):
            raise LlamaServerError(f"{where} returned an unexpected reply: {self._transport.describe(props)}")
        return server_info_from_props(props, self._slots_or_none(), where)

    def props(self) -> dict:
        """GET /props as the server sends it (one try): build, model, slots, default generation settings."""
        props = self._transport.call("GET", "/props", max_tries=1)
        if not isinstance(props, dict):
            raise LlamaServerError(f"{self._transport.where('GET', '/props')} returned an unexpected reply")
        return props

    def model_identity(self) -> ModelIdentity | None:
        """The model this server reports now (GET /v1/models: id, and size from llama.cpp's meta); None when it
        reports none or cannot be asked (the caller then uses the stated default trust and says so). Asked per
        answer, not cached: a server restarted with another model must not keep the old model's trust."""
        try:
            reply = self._transport.call("GET", "/v1/models", max_tries=1)
        except LlamaServerError as exc:
            logger.warning("%s did not report its model (%s)", self.base_url, exc)
            return None
        return model_identity_from_models(reply)

    def _slots_or_none(self) -> list | None:
        try:
            slots = self._transport.call("GET", "/slots", max_tries=1)
        except LlamaServerError as exc:  # disabled (--no-slots) or not offered: /props alone is enough
            logger.debug("/slots unavailable on %s: %s", self.base_url, exc)
            return None
        return slots if isinstance(slots, list) else None

    def ensure_ready(self) -> ServerInfo:
        """wait_until_ready + server_info + verify_schema_enforcement, once per process per base URL."""
        state = self._state
        if state.info is not None:
            return state.info
        with state.ready_lock:
            if state.info is not None:
                return state.info
            self.wait_until_ready()
            info = self.server_info()
            if info.api == API_OPENAI:
                info = self._compat.detect_fallbacks(info)
            state.size_limiter(info.total_slots)
            if not state.schema_enforced:
                # Another process sharing the folder (the same Dagster instance) may have probed this server, or be
                # probing it now: its verdict is used rather than a probe alongside it.
                probe_cache.probe_once(self.base_url, info, self.probe_cache_dir, self.verify_schema_enforcement)
                state.schema_enforced = True
            state.info = info
            logger.info(
                "llama-server ready at %s (model %s, %d slots x %d tokens)",
                self.base_url,
                info.model,
                info.total_slots,
                info.slot_context,
            )
            return info

    def verify_schema_enforcement(self) -> None:
        """Ask for a JSON object whose only field is a random constant the prompt never mentions.

        Only a server that really constrains output to the schema can return it; otherwise raise SchemaNotEnforced.
        """
        nonce = secrets.token_hex(8)
        schema = {
            "title": "enforcement_probe",
            "type": "object",
            "properties": {"nonce": {"const": nonce}},
            "required": ["nonce"],
        }
        messages = [{"role": "user", "content": "Reply with a JSON object."}]
        where = self._transport.where("POST", "/v1/chat/completions")
        try:
            result = self.chat_json(messages, schema, max_tokens=64, temperature=0.0)
        except LlamaRequestRejected as exc:
            raise SchemaNotEnforced(
                f"llama-server at {self.base_url} rejected a json_schema response_format ({exc}); "
                "refusing to proceed: risk assessments need schema-constrained output"
            ) from None
        returned = result.parsed.get("nonce") if result.parsed else None
        if returned != nonce:
            raise SchemaNotEnforced(
                f"llama-server at {self.base_url} ignored the JSON schema ({where}): asked for nonce {nonce!r}, "
                f"got {self._transport.describe(result.content, 120)!r}; refusing to proceed: risk assessments need "
                "schema-constrained output (use a llama-server build that supports response_format json_schema)"
            )
        logger.debug("%s enforces JSON schemas (nonce came back)", self.base_url)

    # --- completions --------------------------------------------------------------------------------------------------
    def chat_json(
        self,
        messages: list[dict],
        schema: dict,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = 42,
        extra: dict | None = None,
        reserved_lease: int | None = None,
    ) -> ChatResult:
        """One schema-constrained chat completion; `parsed` is the JSON object, or None with `parse_error`.

        reserved_lease: the caller (the router) already holds one of this URL's process-wide slots and this
        cross-process lease (a `SlotLease.try_acquire` descriptor); the call takes the lease over and gives it back.
        """
        body = chat_body(messages, schema, max_tokens=max_tokens, temperature=temperature, seed=seed)
        if self._state.api == API_OPENAI:
            self._compat.adapt_chat_body(body)
        if extra:
            body.update(extra)
        where = self._transport.where("POST", "/v1/chat/completions")
        try:
            slot = self._server_slot(reserved_lease)
        except BaseException:
            if reserved_lease is not None:
                SlotLease.release(reserved_lease)
            raise
        try:
            # Streamed: the read timeout is a stall timeout (no token or prompt progress for that long), so a slow
            # completion runs to its end with its slot held, and only a silent server is given up on and retried.
            stream, seconds = self._transport.stream(
                "POST", "/v1/chat/completions", json_body=body, reader=ChatStream, slot=slot
            )
        finally:
            slot.discard()
        reply = stream.reply()
        try:
            return chat_result(reply, latency_ms=seconds * 1000.0, server_url=self.base_url)
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LlamaServerError(f"{where} returned an unexpected reply: {self._transport.describe(reply)}") from None

    # --- token counts -------------------------------------------------------------------------------------------------
    def count_prompt_tokens(self, messages: list[dict]) -> int:
        """Exact prompt tokens for the served model: /apply-template (the text it sees), then /tokenize.

        On an OpenAI-compatible server: vLLM's /tokenize with `messages`; neither: TokenCountUnavailable.
        """
        return len(self.prompt_token_ids(messages))

    def prompt_token_ids(self, messages: list[dict]) -> list[int]:
        """The token ids the served model evaluates for `messages` (chat template applied), without inference."""
        mode = self._state.token_mode
        if mode == TOKENS_NONE:
            raise self._compat.no_token_count("neither /apply-template nor a chat-aware /tokenize")
        if mode == TOKENS_OPENAI:
            return self._compat.token_ids(messages)
        try:
            return self._llama_token_ids(messages)
        except LlamaRequestRejected as exc:
            if exc.status not in MISSING or mode == TOKENS_LLAMA:
                raise
        logger.info("%s has no /apply-template: counting tokens with /tokenize {messages} (vLLM)", self.base_url)
        try:
            tokens = self._compat.token_ids(messages)
        except TokenCountUnavailable:
            self._state.token_mode = TOKENS_NONE
            raise
        self._state.token_mode = TOKENS_OPENAI
        return tokens

    def _llama_token_ids(self, messages: list[dict]) -> list[int]:
        templated = self._transport.call(
            "POST",
            "/apply-template",
            json_body={"messages": messages, "chat_template_kwargs": dict(NO_THINKING)},
        )
        prompt = templated.get("prompt") if isinstance(templated, dict) else None
        if not isinstance(prompt, str):
            raise LlamaServerError(f"{self._transport.where('POST', '/apply-template')} returned no prompt")
        tokenized = self._transport.call(
            "POST", "/tokenize", json_body={"content": prompt, "add_special": True, "parse_special": True}
        )
        tokens = tokenized.get("tokens") if isinstance(tokenized, dict) else None
        if not isinstance(tokens, list):
            raise LlamaServerError(f"{self._transport.where('POST', '/tokenize')} returned no tokens")
        return tokens
