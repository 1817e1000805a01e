"""HTTP to one llama-server base URL: timeouts, retries with back-off, and errors that name the endpoint.

- Retries: connection errors, timeouts and 5xx answers are retried with exponential back-off (`max_tries` tries in
  total); 4xx answers are never retried (the request itself is wrong) and raise `LlamaRequestRejected`.
- Secrets: the API key travels only in the `Authorization: Bearer` header; every exception text and log line is
  built from the URL, status and a short body excerpt, and is scrubbed of the key as a second line of defence.
- One SSL context per process: httpx would load the CA bundle (~30 ms) for every client, even for http:// URLs.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, Self, TypedDict, TypeVar

import httpx

from hsi_dagster.llm.errors import LlamaRequestRejected, LlamaServerError, LlamaServerUnavailable

logger = logging.getLogger("hsi_dagster.llm")

EXCERPT_CHARS = 300
MISSING = (404, 405)  # what an absent route answers (FastAPI-based servers say 404, some proxies 405)
_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

_SSE_FIELDS = frozenset({"", "data", "event", "id", "retry"})  # "" = a comment line (": keep-alive")
_T = TypeVar("_T")


class _RetryableProblem(Exception):
    """One try failed in a way another try may not (network, stall, 5xx); the message says how."""


class StreamProtocolError(ValueError):
    """A streamed reply that is not llama-server's chunks (not JSON, no choices): the message says what came."""


class StreamServerError(Exception):
    """The server reported an error inside the stream (`{"error": {...}}`); `status` is its code (0 if none)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class StreamReader(Protocol):
    """What `Transport.stream` feeds each event's data to (protocol.ChatStream is one)."""

    def feed(self, data: str) -> bool:
        """Take one event's data; True when it showed progress. Raises StreamProtocolError on garbage,
        StreamServerError on an error event."""
        ...

    @property
    def finished(self) -> bool: ...

    def describe(self) -> str:
        """Where the stream stands, for messages ("after 12 generated token(s)")."""
        ...


_R = TypeVar("_R", bound=StreamReader)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


_ssl_context_cache: Any = None
_ssl_context_lock = threading.Lock()


def shared_ssl_context() -> Any:
    """One SSL context for every client of this process (SSLContext is thread-safe)."""
    global _ssl_context_cache
    if _ssl_context_cache is None:
        with _ssl_context_lock:
            if _ssl_context_cache is None:
                _ssl_context_cache = httpx.create_ssl_context()
    return _ssl_context_cache


def normalise_url(url: str) -> str:
    return url.strip().rstrip("/")


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


class ClosesOnExit:
    """`with obj:` closes obj at the end: the one context-manager block of the transport, the client and the router."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError


class TransportOptions(TypedDict, total=False):
    """Transport's keyword options, as LlamaClient takes and passes them on (Transport's defaults apply)."""

    api_key: str | None
    read_timeout: float
    connect_timeout: float
    max_tries: int
    backoff_base: float
    transport: httpx.BaseTransport | None


class Transport(ClosesOnExit):
    """Requests to one base URL with retries; thread-safe (one httpx.Client shared by all threads)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        read_timeout: float = 120.0,
        connect_timeout: float = 5.0,
        max_tries: int = 3,
        backoff_base: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = normalise_url(base_url)
        if "," in url:
            raise ValueError(f"LlamaClient takes one base URL, got a list: {url!r}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"llama-server base URL must start with http:// or https://, got {url!r}")
        if max_tries < 1:
            raise ValueError("max_tries must be >= 1")
        self.base_url = url
        self.read_timeout = float(read_timeout)
        self.connect_timeout = float(connect_timeout)
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
            verify=shared_ssl_context(),
        )

    @property
    def has_api_key(self) -> bool:
        return self._api_key is not None

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def close(self) -> None:
        self._http.close()

    def scrub(self, text: str) -> str:
        """The text with the API key replaced by ***."""
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "***")
        return text

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def where(self, method: str, path: str) -> str:
        """How errors and logs name an endpoint: `POST http://host:port/path`."""
        return f"{method} {self.url(path)}"

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed try `attempt` (1-based): doubling, with 10 % jitter."""
        delay = self.backoff_base * (2 ** (attempt - 1))
        return delay * (1 + 0.1 * random.random())

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict | None = None,
        slot: AbstractContextManager[Any] | None = None,
        max_tries: int | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Send with retries on connection errors, timeouts and 5xx; raise LlamaRequestRejected on 4xx.

        `slot` (a SlotLimiter) is held around each try, so a request waiting for its back-off frees its slot.
        """
        where = self.where(method, path)
        kwargs: dict[str, Any] = {"json": json_body} if json_body is not None else {}
        if timeout is not None:
            kwargs["timeout"] = timeout

        def attempt() -> httpx.Response:
            try:
                response = self._http.request(method, path, **kwargs)
            except _RETRYABLE as exc:
                raise _RetryableProblem(self._network_problem(exc)) from None
            except httpx.HTTPError as exc:  # bad URL, protocol misuse: not worth retrying
                raise LlamaServerError(self.scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            self._check_status(response, where)
            return response

        return self._with_retries(where, max_tries or self.max_tries, slot, attempt)

    def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: dict,
        reader: Callable[[], _R],
        slot: AbstractContextManager[Any] | None = None,
        max_tries: int | None = None,
    ) -> tuple[_R, float]:
        """Send and read a server-sent event stream into a fresh `reader()` per try: (the reader, seconds taken).

        The read timeout is a STALL timeout here: a try fails only when `read_timeout` seconds pass without the
        reader seeing progress (a token, an evaluated prompt batch), however long the whole reply takes; `slot` is
        held for the whole stream. A stall, a dropped connection, a stream cut short and 5xx are retried like
        `request`; 4xx (before or inside the stream) raise LlamaRequestRejected; a reply that is not an event stream
        of JSON (or a JSON reply) raises LlamaServerError at once.
        """
        where = self.where(method, path)

        def attempt() -> tuple[_R, float]:
            started = time.monotonic()
            current = reader()
            try:
                with self._http.stream(method, path, json=json_body) as response:
                    if response.status_code >= 400:
                        response.read()
                        self._check_status(response, where)
                    self._read_events(response, current, where)
            except _RETRYABLE as exc:
                if isinstance(exc, httpx.ReadTimeout):
                    raise _RetryableProblem(self._stalled(current)) from None
                raise _RetryableProblem(f"{self._network_problem(exc)} {current.describe()}") from None
            except httpx.HTTPError as exc:
                raise LlamaServerError(self.scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            if not current.finished:
                raise _RetryableProblem(f"the stream ended {current.describe()} without finishing the completion")
            return current, time.monotonic() - started

        return self._with_retries(where, max_tries or self.max_tries, slot, attempt)

    def _stalled(self, reader: StreamReader) -> str:
        return f"timed out: stalled, no progress for {self.read_timeout:g} s {reader.describe()} (ReadTimeout)"

    def _read_events(self, response: httpx.Response, reader: StreamReader, where: str) -> None:
        """Feed each event's data to `reader`; httpx's read timeout catches silence, the clock here a server that
        keeps talking (comments, keep-alives) without progress."""
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "application/json":  # the server ignored `stream`: one whole reply
            self._feed(reader, response.read().decode(errors="replace"), where)
            return
        if kind != "text/event-stream":
            body = excerpt(response.read().decode(errors="replace"))
            what = kind or "no content type"
            raise LlamaServerError(self.scrub(f"{where} returned a reply that is not an event stream ({what}): {body}"))
        last_progress = time.monotonic()
        data: list[str] = []
        for line in response.iter_lines():
            field, colon, value = line.partition(":")
            value = value.removeprefix(" ")
            if not line:  # the end of an event
                if data:
                    payload, data = "\n".join(data), []
                    if self._feed(reader, payload, where):
                        last_progress = time.monotonic()
                    if payload.strip() == "[DONE]":
                        return
            elif field == "data" and colon:
                data.append(value)
            elif field == "error" and colon:  # older llama-server builds: `error: {...}` as its own line
                self._feed(reader, json.dumps({"error": _json_or_text(value)}), where)
            elif field not in _SSE_FIELDS or not colon:
                raise LlamaServerError(
                    self.scrub(f"{where} sent a line that is not a server-sent event: {excerpt(line)!r}")
                )
            if time.monotonic() - last_progress > self.read_timeout:
                raise _RetryableProblem(self._stalled(reader))
        if data:
            self._feed(reader, "\n".join(data), where)

    def _feed(self, reader: StreamReader, data: str, where: str) -> bool:
        try:
            return reader.feed(data)
        except StreamProtocolError as exc:
            raise LlamaServerError(self.scrub(f"{where} sent {exc}")) from None
        except StreamServerError as exc:
            problem = self.scrub(f"{where} reported an error in its stream {reader.describe()}: {excerpt(str(exc))}")
            if 400 <= exc.status < 500:
                raise LlamaRequestRejected(problem, status=exc.status) from None
            raise _RetryableProblem(f"an error in the stream: {excerpt(str(exc))}") from None

    def _network_problem(self, exc: Exception) -> str:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
        return self.scrub(f"{kind} ({type(exc).__name__}: {exc})")

    def _check_status(self, response: httpx.Response, where: str) -> None:
        """4xx: LlamaRequestRejected; 5xx: a retryable problem; else nothing."""
        status = response.status_code
        if status < 400:
            return
        body = self.scrub(excerpt(response.text))
        if status < 500:
            raise LlamaRequestRejected(f"{where} was rejected with HTTP {status}: {body}", status=status)
        raise _RetryableProblem(f"HTTP {status}: {body}")

    def _with_retries(
        self, where: str, tries: int, slot: AbstractContextManager[Any] | None, attempt: Callable[[], _T]
    ) -> _T:
        """`attempt()` with `slot` held, up to `tries` times while it raises _RetryableProblem (back-off between,
        the slot given back meanwhile); then LlamaServerUnavailable naming the endpoint and the last problem."""
        last_problem = "no attempt made"
        for number in range(1, tries + 1):
            try:
                with slot if slot is not None else nullcontext():
                    return attempt()
            except _RetryableProblem as exc:
                last_problem = self.scrub(str(exc))
            if number < tries:
                delay = self.backoff(number)
                logger.warning("%s: %s (try %d/%d); retrying in %.2f s", where, last_problem, number, tries, delay)
                time.sleep(delay)
        raise LlamaServerUnavailable(f"{where} failed after {tries} tries: {last_problem}")

    def parse_json(self, response: httpx.Response, where: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise LlamaServerError(
                self.scrub(f"{where} returned a reply that is not JSON: {excerpt(response.text)}")
            ) from None

    def call(self, method: str, path: str, *, json_body: dict | None = None, max_tries: int | None = None) -> Any:
        """`request` and the reply's JSON (LlamaServerError naming the endpoint when it is not JSON)."""
        response = self.request(method, path, json_body=json_body, max_tries=max_tries)
        return self.parse_json(response, self.where(method, path))

    def describe(self, value: Any, limit: int = EXCERPT_CHARS) -> str:
        """A scrubbed one-line excerpt of a reply, for error messages."""
        return self.scrub(excerpt(value if isinstance(value, str) else json.dumps(value), limit))

    def probe(self, path: str, timeout: float) -> tuple[int | None, str, bool]:
        """One GET without retries, for readiness polling: (status, scrubbed body excerpt, False), or (None, the
        network problem, refused) when there was no answer; `refused` says the connection itself failed (nothing
        listens there), as opposed to a timeout. Other httpx errors (a bad URL) raise LlamaServerError."""
        probe_timeout = httpx.Timeout(min(self.read_timeout, timeout), connect=self.connect_timeout)
        try:
            response = self._http.get(path, timeout=probe_timeout)
        except _RETRYABLE as exc:
            return None, self.scrub(f"{type(exc).__name__}: {exc}"), isinstance(exc, httpx.ConnectError)
        except httpx.HTTPError as exc:
            raise LlamaServerError(
                self.scrub(f"{self.where('GET', path)} failed: {type(exc).__name__}: {exc}")
            ) from None
        return response.status_code, self.scrub(excerpt(response.text)), False
