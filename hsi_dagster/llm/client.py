"""The only way the project talks to llama-server: a small synchronous httpx client.

Pure Python (no Dagster import) so the CLI, the embedded server, tests and the Dagster resource share it.

Behaviour that matters in production:
- Retries: connection errors, timeouts and 5xx answers are retried with exponential backoff (`max_tries` tries
  in total); 4xx answers are never retried (the request itself is wrong) and raise `LlamaRequestRejected`.
- Secrets: the API key travels only in the `Authorization: Bearer` header; every exception text and log line is
  built from the URL, status and a short body excerpt, and is scrubbed of the key as a second line of defence.
- Slots: a process-wide `SlotLimiter` (a bounded semaphore whose free count can be read) per base URL, sized by the
  server's `total_slots`, keeps the number of completions in flight from this process at or below the number of
  slots, however many threads and `LlamaClient` instances there are. Extra requests wait here instead of queueing
  inside llama-server. The router (hsi_dagster/llm/router.py) picks among several servers by these free counts.
  Across processes (several Dagster runs at once) this semaphore cannot help: the Dagster concurrency pool
  sized to PARALLEL is what bounds the runs that call the server.
- `ensure_ready` (health, per-slot context, JSON-schema enforcement probe) runs once per process per base URL.
- OpenAI-compatible servers without llama-server's own endpoints (vLLM: no /props, /slots, /apply-template; its
  /tokenize takes `messages`) work through a fallback: readiness from GET /v1/models when /health is missing, slot
  count from the configured `fallback_total_slots` (settings PARALLEL), per-slot context from /v1/models
  `max_model_len` (else `fallback_slot_context`), exact token counts from vLLM's /tokenize when it is there, else
  `TokenCountUnavailable` (callers budget with the cl100k estimate). The schema probe runs unchanged.
  On llama-server none of this sends an extra request.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from hsi_dagster.core.text import strip_think

logger = logging.getLogger("hsi_dagster.llm")

_EXCERPT_CHARS = 300


class LlamaServerError(RuntimeError):
    """Base error; the message names the endpoint URL (never the API key)."""


class LlamaServerUnavailable(LlamaServerError):
    """Connection refused, timeouts or 5xx after all retries, or not ready within the start-up timeout."""


class LlamaRequestRejected(LlamaServerError):
    """The server answered 4xx: the request is wrong and retrying cannot help."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # keep `status` when pickled (e.g. across process boundaries)
        return (type(self), (str(self),), {"status": self.status})


class SchemaNotEnforced(LlamaServerError):
    """The server does not constrain output to a JSON schema: refuse to proceed."""


class TokenCountUnavailable(LlamaServerError):
    """The server cannot count prompt tokens exactly (no /apply-template, no chat-aware /tokenize): estimate instead."""


API_LLAMA = "llama.cpp"
API_OPENAI = "openai"
_MISSING = (404, 405)  # what an absent route answers (FastAPI-based servers say 404, some proxies 405)


@dataclass(frozen=True)
class ServerInfo:
    slot_context: int
    total_slots: int
    model: str
    chat_template: str | None
    build_info: str | None
    api: str = API_LLAMA  # API_OPENAI when llama-server's own endpoints are missing (e.g. vLLM)
    missing_endpoints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class ChatResult:
    content: str
    parsed: dict | None
    parse_error: str | None
    usage: Usage
    timings: dict = field(repr=False)
    model: str
    latency_ms: float
    finish_reason: str | None
    server_url: str = field(default="", compare=False)  # which server answered (several behind a router)


# --- process-wide state, keyed by normalised base URL ---------------------------------------------------------
_registry_lock = threading.Lock()
_ready_info: dict[str, ServerInfo] = {}
_ready_locks: dict[str, threading.Lock] = {}
_slot_semaphores: dict[str, tuple[int, SlotLimiter]] = {}
_apis: dict[str, str] = {}  # base URL -> API_LLAMA | API_OPENAI, once detected
_token_modes: dict[str, str] = {}  # base URL -> "llama" (/apply-template + /tokenize) | "openai" | "none"
_openai_models: dict[str, str] = {}  # base URL -> model id from /v1/models (sent as `model` in OpenAI mode)

# Notified whenever any slot in this process is released: the router waits on it for the first free slot anywhere.
SLOTS_CHANGED = threading.Condition()


class SlotLimiter:
    """A bounded counting semaphore whose free count can be read: the router picks servers by it.

    All limiters share the SLOTS_CHANGED condition, so a waiter can wait for a slot on ANY server.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a slot limiter needs at least one slot")
        self.size = int(size)
        self._free = int(size)

    @property
    def free(self) -> int:
        return self._free

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        with SLOTS_CHANGED:
            if not blocking:
                timeout = 0
            if not SLOTS_CHANGED.wait_for(lambda: self._free > 0, timeout):
                return False
            self._free -= 1
            return True

    def release(self) -> None:
        with SLOTS_CHANGED:
            if self._free >= self.size:
                raise ValueError("SlotLimiter released more often than acquired")
            self._free += 1
            SLOTS_CHANGED.notify_all()

    def __enter__(self) -> SlotLimiter:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"SlotLimiter(free={self._free}/{self.size})"


def reset_server_cache(base_url: str | None = None) -> None:
    """Forget readiness and the slot semaphore of one base URL (all when None), e.g. after a server restart."""
    with _registry_lock:
        if base_url is None:
            for registry in (_ready_info, _slot_semaphores, _apis, _token_modes, _openai_models):
                registry.clear()
        else:
            key = _normalise_url(base_url)
            for registry in (_ready_info, _slot_semaphores, _apis, _token_modes, _openai_models):
                registry.pop(key, None)


def slot_semaphore_size(base_url: str) -> int | None:
    """Slots the in-process limiter allows for base_url (None until it has been sized from the server)."""
    with _registry_lock:
        entry = _slot_semaphores.get(_normalise_url(base_url))
    return entry[0] if entry else None


def slot_limiter(base_url: str) -> SlotLimiter | None:
    """The process-wide slot limiter of base_url (None until sized by ensure_ready or a first completion)."""
    with _registry_lock:
        entry = _slot_semaphores.get(_normalise_url(base_url))
    return entry[1] if entry else None


def slot_free_count(base_url: str) -> int | None:
    """Slots of base_url free in this process right now (None until the limiter has been sized)."""
    limiter = slot_limiter(base_url)
    return limiter.free if limiter else None


_ssl_context_cache: Any = None
_ssl_context_lock = threading.Lock()


def _shared_ssl_context() -> Any:
    """httpx builds a fresh SSL context (loading the CA bundle, ~30 ms) for every Client, even for http:// URLs;
    a pipeline run builds several clients, so one context per process is shared (SSLContext is thread-safe)."""
    global _ssl_context_cache
    if _ssl_context_cache is None:
        with _ssl_context_lock:
            if _ssl_context_cache is None:
                _ssl_context_cache = httpx.create_ssl_context()
    return _ssl_context_cache


def _normalise_url(url: str) -> str:
    return url.strip().rstrip("/")


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _error_message(body: Any) -> str:
    """llama-server puts errors in {"error": {"message": ...}}; fall back to the raw text."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return json.dumps(body) if not isinstance(body, str) else body


def _schema_name(schema: dict) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "response"))
    return name[:64] or "response"


class LlamaClient:
    """Synchronous client for one llama-server base URL. Thread-safe; share it or make many."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        read_timeout: float = 120.0,
        connect_timeout: float = 5.0,
        startup_timeout: float = 300.0,
        max_tries: int = 3,
        backoff_base: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        fallback_total_slots: int | None = None,
        fallback_slot_context: int | None = None,
    ) -> None:
        url = _normalise_url(base_url)
        if "," in url:
            raise ValueError(f"LlamaClient takes one base URL, got a list: {url!r}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"llama-server base URL must start with http:// or https://, got {url!r}")
        if max_tries < 1:
            raise ValueError("max_tries must be >= 1")
        self.base_url = url
        self.read_timeout = float(read_timeout)
        self.connect_timeout = float(connect_timeout)
        self.startup_timeout = float(startup_timeout)
        self.max_tries = int(max_tries)
        self.backoff_base = float(backoff_base)
        # Only for OpenAI-compatible servers without /props (vLLM): slots in flight, and context if /v1/models lacks it.
        self.fallback_total_slots = int(fallback_total_slots) if fallback_total_slots else None
        self.fallback_slot_context = int(fallback_slot_context) if fallback_slot_context else None
        self._api_key = api_key or None
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._http = httpx.Client(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
            transport=transport,
            verify=_shared_ssl_context(),
        )

    def __repr__(self) -> str:  # never show the key
        return f"LlamaClient({self.base_url!r}, api_key={'***' if self._api_key else None})"

    def __enter__(self) -> LlamaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- plumbing -----------------------------------------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "***")
        return text

    def _url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _backoff(self, attempt: int) -> float:
        delay = self.backoff_base * (2 ** (attempt - 1))
        return delay * (1 + 0.1 * random.random())

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict | None = None,
        uses_slot: bool = False,
        max_tries: int | None = None,
        timeout: httpx.Timeout | None = None,
        slot_reserved: bool = False,
    ) -> httpx.Response:
        """Send with retries on connection errors, timeouts and 5xx; raise LlamaRequestRejected on 4xx.

        uses_slot takes one of the URL's process-wide slots per try, unless the caller already holds one
        (slot_reserved, as the router does).
        """
        tries = max_tries or self.max_tries
        where = f"{method} {self._url(path)}"
        last_problem = "no attempt made"
        for attempt in range(1, tries + 1):
            semaphore = self._slot_semaphore() if uses_slot and not slot_reserved else None
            try:
                if semaphore is not None:
                    semaphore.acquire()
                try:
                    kwargs: dict[str, Any] = {"json": json_body} if json_body is not None else {}
                    if timeout is not None:
                        kwargs["timeout"] = timeout
                    response = self._http.request(method, path, **kwargs)
                finally:
                    if semaphore is not None:
                        semaphore.release()
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
                last_problem = self._scrub(f"{kind} ({type(exc).__name__}: {exc})")
            except httpx.HTTPError as exc:  # bad URL, protocol misuse: not worth retrying
                raise LlamaServerError(self._scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            else:
                status = response.status_code
                if status < 400:
                    return response
                body = self._scrub(_excerpt(response.text))
                if status < 500:
                    raise LlamaRequestRejected(f"{where} was rejected with HTTP {status}: {body}", status=status)
                last_problem = f"HTTP {status}: {body}"
            if attempt < tries:
                delay = self._backoff(attempt)
                logger.warning("%s: %s (try %d/%d); retrying in %.2f s", where, last_problem, attempt, tries, delay)
                time.sleep(delay)
        raise LlamaServerUnavailable(f"{where} failed after {tries} tries: {last_problem}")

    def _json(self, response: httpx.Response, where: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise LlamaServerError(
                self._scrub(f"{where} returned a reply that is not JSON: {_excerpt(response.text)}")
            ) from None

    def _slot_semaphore(self) -> SlotLimiter:
        with _registry_lock:
            entry = _slot_semaphores.get(self.base_url)
        if entry is None:
            slots = max(1, self.server_info().total_slots)
            with _registry_lock:
                entry = _slot_semaphores.setdefault(self.base_url, (slots, SlotLimiter(slots)))
            logger.debug("in-process limit for %s: %d request(s) in flight", self.base_url, entry[0])
        return entry[1]

    # --- public API -----------------------------------------------------------------------------------------------
    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Poll GET /health until 200; 503 "Loading model" and connection refused mean wait (up to startup_timeout,
        or `timeout` seconds: 0 = one probe). No /health (404, e.g. an OpenAI-compatible server): GET /v1/models."""
        limit = self.startup_timeout if timeout is None else max(0.0, float(timeout))
        deadline = time.monotonic() + limit
        probe_timeout = httpx.Timeout(min(self.read_timeout, 10.0), connect=self.connect_timeout)
        path = "/v1/models" if _apis.get(self.base_url) == API_OPENAI else "/health"
        where = f"GET {self._url(path)}"
        step = 0
        last_problem = "no answer yet"
        while True:
            try:
                response = self._http.get(path, timeout=probe_timeout)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            except httpx.HTTPError as exc:
                raise LlamaServerError(self._scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            else:
                if response.status_code == 200:
                    logger.debug("%s: ready", where)
                    return
                body = self._scrub(_excerpt(response.text))
                if response.status_code in _MISSING and path == "/health":
                    logger.info("%s: %s; readiness from GET /v1/models instead", where, response.status_code)
                    path = "/v1/models"
                    where = f"GET {self._url(path)}"
                    continue
                if 400 <= response.status_code < 500:
                    raise LlamaRequestRejected(
                        f"{where} was rejected with HTTP {response.status_code}: {body}", status=response.status_code
                    )
                last_problem = f"HTTP {response.status_code}: {body}"
            last_problem = self._scrub(last_problem)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LlamaServerUnavailable(
                    f"llama-server at {self.base_url} was not ready within {limit:g} s "
                    f"(last answer from {where}: {last_problem})"
                )
            logger.debug("%s: not ready yet (%s)", where, last_problem)
            time.sleep(min(max(0.02, self.backoff_base * (2**step)), 1.0, remaining))
            step += 1

    def server_info(self) -> ServerInfo:
        """Per-slot context and slot count from /props, cross-checked against /slots when it is enabled."""
        where = f"GET {self._url('/props')}"
        if _apis.get(self.base_url) == API_OPENAI:
            return self._openai_server_info()
        try:
            props = self._json(self._request("GET", "/props"), where)
        except LlamaRequestRejected as exc:
            if exc.status not in _MISSING:
                raise
            logger.info("%s: HTTP %s; treating %s as an OpenAI-compatible server", where, exc.status, self.base_url)
            with _registry_lock:
                _apis[self.base_url] = API_OPENAI
            return self._openai_server_info()
        if not isinstance(props, dict):
            raise LlamaServerError(f"{where} returned an unexpected reply: {_excerpt(json.dumps(props))}")
        settings = props.get("default_generation_settings") or {}
        slot_context = settings.get("n_ctx")
        total_slots = props.get("total_slots")

        slots = self._slots_or_none()
        if slots:
            slot_ctxs = [int(s["n_ctx"]) for s in slots if isinstance(s, dict) and "n_ctx" in s]
            if total_slots is None:
                total_slots = len(slots)
            elif len(slots) != total_slots:
                logger.warning(
                    "%s says %s slots but /slots lists %d; using the smaller", where, total_slots, len(slots)
                )
                total_slots = min(int(total_slots), len(slots))
            if slot_ctxs:
                if slot_context is None:
                    slot_context = min(slot_ctxs)
                elif min(slot_ctxs) != slot_context:
                    logger.warning(
                        "%s says %s tokens per slot but /slots says %s; using the smallest",
                        where,
                        slot_context,
                        slot_ctxs,
                    )
                    slot_context = min([int(slot_context), *slot_ctxs])
        if slot_context is None or total_slots is None:
            raise LlamaServerError(
                f"{where} did not report default_generation_settings.n_ctx and total_slots (and /slots is unavailable)"
            )
        return ServerInfo(
            slot_context=int(slot_context),
            total_slots=int(total_slots),
            model=str(props.get("model_alias") or props.get("model_path") or "unknown"),
            chat_template=props.get("chat_template"),
            build_info=props.get("build_info"),
        )

    def _openai_server_info(self) -> ServerInfo:
        """No /props: model and max_model_len from GET /v1/models, slot count from configuration (PARALLEL)."""
        where = f"GET {self._url('/v1/models')}"
        reply = self._json(self._request("GET", "/v1/models"), where)
        models = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(models, list) or not models or not isinstance(models[0], dict):
            raise LlamaServerError(f"{where} lists no model: {_excerpt(self._scrub(json.dumps(reply)))}")
        model = models[0]
        context = model.get("max_model_len") or self.fallback_slot_context
        if not context:
            raise LlamaServerError(
                f"{self.base_url} has no /props and {where} reports no max_model_len: configure the per-slot context "
                "(CTX_SIZE / PARALLEL)"
            )
        if not self.fallback_total_slots:
            raise LlamaServerError(
                f"{self.base_url} has no /props to report its slots: configure how many requests it may run at once "
                "(PARALLEL)"
            )
        model_id = str(model.get("id") or "unknown")
        with _registry_lock:
            _openai_models[self.base_url] = model_id
        return ServerInfo(
            slot_context=int(context),
            total_slots=int(self.fallback_total_slots),
            model=model_id,
            chat_template=None,
            build_info=str(model.get("owned_by")) if model.get("owned_by") else None,
            api=API_OPENAI,
            missing_endpoints=("/props",),
        )

    def _is_missing(self, method: str, path: str, body: dict | None = None) -> bool:
        """One try at an endpoint: True when it is not there in llama-server's form (any 4xx but 401/403)."""
        try:
            self._request(method, path, json_body=body, max_tries=1)
        except LlamaRequestRejected as exc:
            if exc.status in (401, 403):
                raise
            return True
        return False

    def _detect_openai_fallbacks(self, info: ServerInfo) -> ServerInfo:
        """Which llama-server-only endpoints are missing, and how (if at all) prompt tokens can be counted exactly."""
        probe = [{"role": "user", "content": "x"}]
        missing = list(info.missing_endpoints)
        for path in ("/health", "/slots"):
            if self._is_missing("GET", path):
                missing.append(path)
        apply_missing = self._is_missing("POST", "/apply-template", {"messages": probe})
        if apply_missing:
            missing.append("/apply-template")
        mode = "llama" if not apply_missing else "none"
        if apply_missing:
            try:
                self._openai_token_ids(probe)
                mode = "openai"
            except TokenCountUnavailable:
                missing.append("/tokenize")
        with _registry_lock:
            _token_modes[self.base_url] = mode
        info = dataclasses.replace(info, missing_endpoints=tuple(missing))
        logger.info(
            "%s is OpenAI-compatible: missing %s; slots from configuration (%d), context %d, exact token counts: %s",
            self.base_url,
            ", ".join(missing),
            info.total_slots,
            info.slot_context,
            {"openai": "/tokenize with messages", "llama": "/apply-template + /tokenize"}.get(mode, "unavailable"),
        )
        return info

    def _slots_or_none(self) -> list | None:
        try:
            response = self._request("GET", "/slots", max_tries=1)
        except LlamaServerError as exc:  # disabled (--no-slots) or not offered: /props alone is enough
            logger.debug("/slots unavailable on %s: %s", self.base_url, exc)
            return None
        try:
            slots = response.json()
        except ValueError:
            return None
        return slots if isinstance(slots, list) else None

    def chat_json(
        self,
        messages: list[dict],
        schema: dict,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = 42,
        extra: dict | None = None,
        slot_reserved: bool = False,
    ) -> ChatResult:
        """One schema-constrained chat completion; `parsed` is the JSON object, or None with `parse_error`.

        slot_reserved: the caller already holds one of this URL's process-wide slots (the router does).
        """
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
            },
            "chat_template_kwargs": {"enable_thinking": False},
            "cache_prompt": True,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = int(seed)
        if _apis.get(self.base_url) == API_OPENAI:  # not llama-server: name the model, drop llama-only fields
            body.pop("cache_prompt")
            if self.base_url in _openai_models:
                body["model"] = _openai_models[self.base_url]
        if extra:
            body.update(extra)
        where = f"POST {self._url('/v1/chat/completions')}"
        response = self._request(
            "POST", "/v1/chat/completions", json_body=body, uses_slot=True, slot_reserved=slot_reserved
        )
        latency_ms = response.elapsed.total_seconds() * 1000.0
        reply = self._json(response, where)
        try:
            choice = reply["choices"][0]
            content = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LlamaServerError(
                self._scrub(f"{where} returned an unexpected reply: {_excerpt(json.dumps(reply))}")
            ) from None
        finish_reason = choice.get("finish_reason")
        parsed, parse_error = self._parse(content, finish_reason)
        usage_raw = reply.get("usage") or {}
        timings = reply.get("timings") or {}
        cached = (usage_raw.get("prompt_tokens_details") or {}).get("cached_tokens", timings.get("cache_n", 0))
        usage = Usage(
            prompt_tokens=int(usage_raw.get("prompt_tokens", timings.get("prompt_n", 0)) or 0),
            completion_tokens=int(usage_raw.get("completion_tokens", timings.get("predicted_n", 0)) or 0),
            cached_tokens=int(cached or 0),
        )
        return ChatResult(
            content=content,
            parsed=parsed,
            parse_error=parse_error,
            usage=usage,
            timings=timings,
            model=str(reply.get("model") or ""),
            latency_ms=latency_ms,
            finish_reason=finish_reason,
            server_url=self.base_url,
        )

    @staticmethod
    def _parse(content: str, finish_reason: str | None) -> tuple[dict | None, str | None]:
        text = strip_think(content)
        hint = " (finish_reason=length: max_tokens too small?)" if finish_reason == "length" else ""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"invalid JSON: {exc}{hint}"
        if not isinstance(value, dict):
            return None, f"expected a JSON object, got {type(value).__name__}{hint}"
        return value, None

    def count_prompt_tokens(self, messages: list[dict]) -> int:
        """Exact prompt tokens for the served model: /apply-template (the text it sees), then /tokenize.

        On an OpenAI-compatible server: vLLM's /tokenize with `messages`; neither: TokenCountUnavailable.
        """
        return len(self.prompt_token_ids(messages))

    def prompt_token_ids(self, messages: list[dict]) -> list[int]:
        """The token ids the served model evaluates for `messages` (chat template applied), without inference."""
        mode = _token_modes.get(self.base_url)
        if mode == "none":
            raise self._no_token_count("neither /apply-template nor a chat-aware /tokenize")
        if mode == "openai":
            return self._openai_token_ids(messages)
        try:
            return self._llama_token_ids(messages)
        except LlamaRequestRejected as exc:
            if exc.status not in _MISSING or mode == "llama":
                raise
        logger.info("%s has no /apply-template: counting tokens with /tokenize {messages} (vLLM)", self.base_url)
        try:
            tokens = self._openai_token_ids(messages)
        except TokenCountUnavailable:
            with _registry_lock:
                _token_modes[self.base_url] = "none"
            raise
        with _registry_lock:
            _token_modes[self.base_url] = "openai"
        return tokens

    def _no_token_count(self, why: str) -> TokenCountUnavailable:
        return TokenCountUnavailable(
            f"exact token count unavailable on this server ({self.base_url}: {why}); "
            "budget prompts with the cl100k estimate instead"
        )

    def _openai_token_ids(self, messages: list[dict]) -> list[int]:
        """vLLM's POST /tokenize {messages}: the chat template applied server-side, as in a completion."""
        body: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": True,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        if self.base_url in _openai_models:
            body["model"] = _openai_models[self.base_url]
        where = f"POST {self._url('/tokenize')}"
        try:
            reply = self._json(self._request("POST", "/tokenize", json_body=body), where)
        except LlamaRequestRejected as exc:
            if exc.status in (401, 403):
                raise
            raise self._no_token_count(f"{where} answered HTTP {exc.status}") from None
        tokens = reply.get("tokens") if isinstance(reply, dict) else None
        # llama-server's /tokenize ignores `messages` and returns no tokens: that is not a count.
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
            raise self._no_token_count(f"{where} does not tokenize chat messages")
        return tokens

    def _llama_token_ids(self, messages: list[dict]) -> list[int]:
        kwargs = {"enable_thinking": False}
        where = f"POST {self._url('/apply-template')}"
        templated = self._json(
            self._request("POST", "/apply-template", json_body={"messages": messages, "chat_template_kwargs": kwargs}),
            where,
        )
        prompt = templated.get("prompt") if isinstance(templated, dict) else None
        if not isinstance(prompt, str):
            raise LlamaServerError(f"{where} returned no prompt")
        where = f"POST {self._url('/tokenize')}"
        tokenized = self._json(
            self._request(
                "POST", "/tokenize", json_body={"content": prompt, "add_special": True, "parse_special": True}
            ),
            where,
        )
        tokens = tokenized.get("tokens") if isinstance(tokenized, dict) else None
        if not isinstance(tokens, list):
            raise LlamaServerError(f"{where} returned no tokens")
        return tokens

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
        where = f"POST {self._url('/v1/chat/completions')}"
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
                f"got {_excerpt(self._scrub(result.content), 120)!r}; refusing to proceed: risk assessments need "
                "schema-constrained output (use a llama-server build that supports response_format json_schema)"
            )
        logger.debug("%s enforces JSON schemas (nonce came back)", self.base_url)

    def ensure_ready(self) -> ServerInfo:
        """wait_until_ready + server_info + verify_schema_enforcement, once per process per base URL."""
        with _registry_lock:
            cached = _ready_info.get(self.base_url)
            url_lock = _ready_locks.setdefault(self.base_url, threading.Lock())
        if cached is not None:
            return cached
        with url_lock:
            with _registry_lock:
                cached = _ready_info.get(self.base_url)
            if cached is not None:
                return cached
            self.wait_until_ready()
            info = self.server_info()
            if info.api == API_OPENAI:
                info = self._detect_openai_fallbacks(info)
            with _registry_lock:
                _slot_semaphores.setdefault(self.base_url, (info.total_slots, SlotLimiter(max(1, info.total_slots))))
            self.verify_schema_enforcement()
            with _registry_lock:
                _ready_info[self.base_url] = info
            logger.info(
                "llama-server ready at %s (model %s, %d slots x %d tokens)",
                self.base_url,
                info.model,
                info.total_slots,
                info.slot_context,
            )
            return info
