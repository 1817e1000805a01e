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
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Self, TypedDict

import httpx

from hsi_dagster.llm.errors import LlamaRequestRejected, LlamaServerError, LlamaServerUnavailable

logger = logging.getLogger("hsi_dagster.llm")

EXCERPT_CHARS = 300
MISSING = (404, 405)  # what an absent route answers (FastAPI-based servers say 404, some proxies 405)
_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

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
        tries = max_tries or self.max_tries
        where = self.where(method, path)
        last_problem = "no attempt made"
        kwargs: dict[str, Any] = {"json": json_body} if json_body is not None else {}
        if timeout is not None:
            kwargs["timeout"] = timeout
        for attempt in range(1, tries + 1):
            try:
                with slot if slot is not None else nullcontext():
                    response = self._http.request(method, path, **kwargs)
            except _RETRYABLE as exc:
                kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
                last_problem = self.scrub(f"{kind} ({type(exc).__name__}: {exc})")
            except httpx.HTTPError as exc:  # bad URL, protocol misuse: not worth retrying
                raise LlamaServerError(self.scrub(f"{where} failed: {type(exc).__name__}: {exc}")) from None
            else:
                status = response.status_code
                if status < 400:
                    return response
                body = self.scrub(excerpt(response.text))
                if status < 500:
                    raise LlamaRequestRejected(f"{where} was rejected with HTTP {status}: {body}", status=status)
                last_problem = f"HTTP {status}: {body}"
            if attempt < tries:
                delay = self.backoff(attempt)
                logger.warning("%s: %s (try %d/%d); retrying in %.2f s", where, last_problem, attempt, tries, delay)
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
