"""The only way the project talks to llama-server: a small synchronous httpx client.

Pure Python (no Dagster import) so the CLI, the embedded server, tests and the Dagster resource share it.

Behaviour that matters in production:
- Retries: connection errors, timeouts and 5xx answers are retried with exponential backoff (`max_tries` tries
  in total); 4xx answers are never retried (the request itself is wrong) and raise `LlamaRequestRejected`.
- Secrets: the API key travels only in the `Authorization: Bearer` header; every exception text and log line is
  built from the URL, status and a short body excerpt, and is scrubbed of the key as a second line of defence.
- Slots: a process-wide `threading.BoundedSemaphore` per base URL, sized by the server's `total_slots`, keeps the
  number of completions in flight from this process at or below the number of slots, however many threads and
  `LlamaClient` instances there are. Extra requests wait here instead of queueing inside llama-server.
  Across processes (several Dagster runs at once) this semaphore cannot help: the Dagster concurrency pool
  sized to PARALLEL is what bounds the runs that call the server.
- `ensure_ready` (health, per-slot context, JSON-schema enforcement probe) runs once per process per base URL.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class ServerInfo:
    slot_context: int
    total_slots: int
    model: str
    chat_template: str | None
    build_info: str | None


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


# --- process-wide state, keyed by normalised base URL ---------------------------------------------------------
_registry_lock = threading.Lock()
_ready_info: dict[str, ServerInfo] = {}
_ready_locks: dict[str, threading.Lock] = {}
_slot_semaphores: dict[str, tuple[int, threading.BoundedSemaphore]] = {}


def reset_server_cache(base_url: str | None = None) -> None:
    """Forget readiness and the slot semaphore of one base URL (all when None), e.g. after a server restart."""
    with _registry_lock:
        if base_url is None:
            _ready_info.clear()
            _slot_semaphores.clear()
        else:
            key = _normalise_url(base_url)
            _ready_info.pop(key, None)
            _slot_semaphores.pop(key, None)


def slot_semaphore_size(base_url: str) -> int | None:
    """Slots the in-process limiter allows for base_url (None until it has been sized from the server)."""
    with _registry_lock:
        entry = _slot_semaphores.get(_normalise_url(base_url))
    return entry[0] if entry else None


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
        self._api_key = api_key or None
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._http = httpx.Client(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(self.read_timeout, connect=self.connect_timeout),
            transport=transport,
        )

    def __repr__(self) -> str:  # never show the key
        return f"LlamaClient({self.base_url!r}, api_key={'***' if self._api_key else None})"

    def __enter__(self) -> "LlamaClient":
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
    ) -> httpx.Response:
        """Send with retries on connection errors, timeouts and 5xx; raise LlamaRequestRejected on 4xx."""
        tries = max_tries or self.max_tries
        where = f"{method} {self._url(path)}"
        last_problem = "no attempt made"
        for attempt in range(1, tries + 1):
            semaphore = self._slot_semaphore() if uses_slot else None
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

    def _slot_semaphore(self) -> threading.BoundedSemaphore:
        with _registry_lock:
            entry = _slot_semaphores.get(self.base_url)
        if entry is None:
            slots = max(1, self.server_info().total_slots)
            with _registry_lock:
                entry = _slot_semaphores.setdefault(self.base_url, (slots, threading.BoundedSemaphore(slots)))
            logger.debug("in-process limit for %s: %d request(s) in flight", self.base_url, entry[0])
        return entry[1]

    # --- public API -----------------------------------------------------------------------------------------------
    def wait_until_ready(self) -> None:
        """Poll GET /health until 200; 503 "Loading model" and connection refused mean wait (up to startup_timeout)."""
        deadline = time.monotonic() + self.startup_timeout
        probe_timeout = httpx.Timeout(min(self.read_timeout, 10.0), connect=self.connect_timeout)
        where = f"GET {self._url('/health')}"
        step = 0
        last_problem = "no answer yet"
        while True:
            try:
                response = self._http.get("/health", timeout=probe_timeout)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            except httpx.HTTPError as exc:
                raise LlamaServerError(self._scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            else:
                if response.status_code == 200:
                    logger.debug("%s: ready", where)
                    return
                body = self._scrub(_excerpt(response.text))
                if 400 <= response.status_code < 500:
                    raise LlamaRequestRejected(
                        f"{where} was rejected with HTTP {response.status_code}: {body}", status=response.status_code
                    )
                last_problem = f"HTTP {response.status_code}: {body}"
            last_problem = self._scrub(last_problem)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LlamaServerUnavailable(
                    f"llama-server at {self.base_url} was not ready within {self.startup_timeout:g} s "
                    f"(last answer from {where}: {last_problem})"
                )
            logger.debug("%s: not ready yet (%s)", where, last_problem)
            time.sleep(min(max(0.02, self.backoff_base * (2**step)), 1.0, remaining))
            step += 1

    def server_info(self) -> ServerInfo:
        """Per-slot context and slot count from /props, cross-checked against /slots when it is enabled."""
        where = f"GET {self._url('/props')}"
        props = self._json(self._request("GET", "/props"), where)
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
                logger.warning("%s says %s slots but /slots lists %d; using the smaller", where, total_slots, len(slots))
                total_slots = min(int(total_slots), len(slots))
            if slot_ctxs:
                if slot_context is None:
                    slot_context = min(slot_ctxs)
                elif min(slot_ctxs) != slot_context:
                    logger.warning(
                        "%s says %s tokens per slot but /slots says %s; using the smallest", where, slot_context, slot_ctxs
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
    ) -> ChatResult:
        """One schema-constrained chat completion; `parsed` is the JSON object, or None with `parse_error`."""
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
        if extra:
            body.update(extra)
        where = f"POST {self._url('/v1/chat/completions')}"
        response = self._request("POST", "/v1/chat/completions", json_body=body, uses_slot=True)
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
        """Exact prompt tokens for the served model: /apply-template (the text it sees), then /tokenize."""
        return len(self.prompt_token_ids(messages))

    def prompt_token_ids(self, messages: list[dict]) -> list[int]:
        """The token ids the served model evaluates for `messages` (chat template applied), without inference."""
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
            with _registry_lock:
                _slot_semaphores.setdefault(
                    self.base_url, (info.total_slots, threading.BoundedSemaphore(max(1, info.total_slots)))
                )
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
