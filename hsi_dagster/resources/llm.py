"""`LlamaServerResource`: the Dagster face of `hsi_dagster.llm.client.LlamaClient`.

A thin wrapper: all HTTP behaviour (retries, timeouts, the in-process slot limit, the schema-enforcement probe)
lives in the client so that code outside Dagster behaves the same. Inside a run the client is built in
`setup_for_execution` and closed in `teardown_after_execution`; outside a run (tests, CLI) `get_client()` builds
one lazily.

`base_url` accepts a comma-separated list (the LLAMA_SERVER_URL format), but this resource talks to the FIRST
URL only; routing across several servers comes with the deployment work.

Concurrency: the client's semaphore caps requests in flight per server within one process; across runs and
processes the Dagster concurrency pool sized to PARALLEL is what keeps the server's slots from being oversubscribed.
"""


import threading

import dagster as dg
from pydantic import PrivateAttr

from hsi_dagster.llm.client import ChatResult, LlamaClient, LlamaServerError, ServerInfo

_lazy_lock = threading.Lock()

# live_slot_context() must answer fast when the server is away: the caller falls back to settings.
_PROBE_CONNECT_SECONDS = 1.0
_PROBE_READ_SECONDS = 3.0


class LlamaServerResource(dg.ConfigurableResource):
    """Schema-constrained chat completions and exact token counts from llama-server."""

    base_url: str
    api_key: str | None = None
    read_timeout_seconds: float = 120
    startup_timeout_seconds: float = 300
    max_output_tokens: int = 1536

    _client: LlamaClient | None = PrivateAttr(default=None)

    @property
    def primary_url(self) -> str:
        """The first URL of `base_url` (the one this resource uses)."""
        urls = [url.strip().rstrip("/") for url in self.base_url.split(",") if url.strip()]
        if not urls:
            raise ValueError("LlamaServerResource.base_url is empty: set LLAMA_SERVER_URL")
        return urls[0]

    def _build_client(self, **overrides: float) -> LlamaClient:
        kwargs: dict = {
            "api_key": self.api_key or None,
            "read_timeout": float(self.read_timeout_seconds),
            "startup_timeout": float(self.startup_timeout_seconds),
        }
        kwargs.update(overrides)
        return LlamaClient(self.primary_url, **kwargs)

    # --- lifecycle ---
    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._client = self._build_client()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def get_client(self) -> LlamaClient:
        """The run's client, or a lazily built one when used outside a Dagster run."""
        if self._client is None:
            with _lazy_lock:
                if self._client is None:
                    self._client = self._build_client()
        return self._client

    def client(self) -> LlamaClient:
        return self.get_client()

    # --- delegation ---
    def ensure_ready(self) -> ServerInfo:
        """Health, per-slot context and the schema-enforcement probe (once per process per URL)."""
        return self.get_client().ensure_ready()

    def live_slot_context(self) -> int | None:
        """Per-slot context reported by the server now, or None when it cannot be reached quickly."""
        try:
            with self._build_client(
                connect_timeout=_PROBE_CONNECT_SECONDS, read_timeout=_PROBE_READ_SECONDS, max_tries=1
            ) as probe:
                return probe.server_info().slot_context
        except LlamaServerError as exc:
            dg.get_dagster_logger().debug(f"live slot context unavailable: {exc}")
            return None

    def chat_json(
        self,
        messages: list[dict],
        schema: dict,
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = 42,
        extra: dict | None = None,
    ) -> ChatResult:
        """LlamaClient.chat_json; max_tokens defaults to max_output_tokens."""
        return self.get_client().chat_json(
            messages,
            schema,
            max_tokens=self.max_output_tokens if max_tokens is None else max_tokens,
            temperature=temperature,
            seed=seed,
            extra=extra,
        )

    def count_prompt_tokens(self, messages: list[dict]) -> int:
        return self.get_client().count_prompt_tokens(messages)
