"""`LlamaServerResource`: the Dagster face of `hsi_dagster.llm.client.LlamaClient`.

A thin wrapper: all HTTP behaviour (retries, timeouts, the in-process slot limit, the schema-enforcement probe)
lives in the client so that code outside Dagster behaves the same. Inside a run the client is built in
`setup_for_execution` and closed in `teardown_after_execution`; outside a run (tests, CLI) `get_client()` builds
one lazily.

`urls` are the servers of LLAMA_SERVER_URL, split once by the settings (`HsiSettings.llm_urls`) and passed as
plain values by `LlamaServerResource.from_settings`. One URL: exactly one `LlamaClient`. Several: a `LlamaRouter`
(hsi_dagster/llm/router.py) with one client per URL sends each completion to the server with the most free slots,
skips servers that are down and retries them after a cool-down; `ensure_ready` reports the smallest per-slot
context of the reachable servers so one budget fits all. `get_client()` is then the FIRST URL's client (kept for
callers that want one server); `chat_json`/`count_prompt_tokens` go through the router.

OpenAI-compatible servers (vLLM) have no /props: the slot count comes from `fallback_total_slots` and, when
/v1/models gives no max_model_len, the context from `fallback_slot_context`; `from_settings` sets them to PARALLEL
and CTX_SIZE / PARALLEL. The resource never reads settings itself: every value comes in as a field, the API key as
`dg.EnvVar("LLAMA_API_KEY")` (the only secret).

Concurrency: the client's semaphore caps requests in flight per server within one process, and every completion
also holds one of the server's cross-process slot leases (lock files in `slot_lease_dir`, HSI_SLOT_LEASE_DIR), so
every launch path at once (daemon, UI, backfill, CLI materialization, `hsi process`) stays within the server's
slots. The Dagster `llama_slots` pool (run granularity) only gates the daemon's launches, so runs waiting for a slot
wait in its queue rather than as processes.

The schema probe's pass is shared by the processes that see the same `probe_cache_dir` (HSI_PROBE_CACHE_DIR, see
hsi_dagster/llm/probe_cache.py); unset, a run's resource uses `<the run's instance storage directory>/hsi-schema-probe`
(taken from the init context in `setup_for_execution`), so the runs of one Dagster instance, daemon and `hsi process`
alike, probe a server once. Outside a run with the field unset, nothing is shared.
"""

import threading
from pathlib import Path
from typing import Any, Unpack

import dagster as dg
from pydantic import Field, PrivateAttr

from hsi_dagster.llm import probe_cache
from hsi_dagster.llm.client import ChatResult, LlamaClient, LlamaServerError, ServerInfo
from hsi_dagster.llm.protocol import ChatOptions, ModelIdentity
from hsi_dagster.llm.router import COOLDOWN_SECONDS, MAX_COOLDOWN_SECONDS, LlamaRouter
from hsi_dagster.settings import HsiSettings
from hsi_dagster.steps import configured_slot_context

_lazy_lock = threading.Lock()

# live_slot_context() must answer fast when the server is away: the caller falls back to settings.
_PROBE_CONNECT_SECONDS = 1.0
_PROBE_READ_SECONDS = 3.0


def instance_probe_cache_dir(instance: dg.DagsterInstance | None) -> str | None:
    """`<instance storage directory>/hsi-schema-probe`, the verdicts shared by the instance's runs; None without one."""
    if instance is None:
        return None
    try:
        storage = instance.storage_directory()
    except (AttributeError, NotImplementedError):  # an instance without local artifact storage
        return None
    return str(Path(storage) / probe_cache.INSTANCE_FOLDER) if storage else None


class LlamaServerResource(dg.ConfigurableResource):
    """Schema-constrained chat completions and exact token counts from llama-server."""

    urls: list[str] = Field(description="Base URL of each llama-server, in order (LLAMA_SERVER_URL).")
    api_key: str | None = None  # the Bearer key: dg.EnvVar("LLAMA_API_KEY"), never a plain value
    read_timeout_seconds: float = 120
    startup_timeout_seconds: float = 300
    # Connection refused this long = no server is starting at the URL: the run fails at once, naming it.
    refused_timeout_seconds: float = 5
    max_output_tokens: int = 1536
    # Only for OpenAI-compatible servers without /props (vLLM): PARALLEL and CTX_SIZE / PARALLEL. None = such a
    # server is refused with a message saying what to configure.
    fallback_total_slots: int | None = None
    fallback_slot_context: int | None = None
    # Several URLs: how long a server that is down sits out (doubling per failure up to the maximum).
    cooldown_seconds: float = COOLDOWN_SECONDS
    max_cooldown_seconds: float = MAX_COOLDOWN_SECONDS
    # Where the cross-process slot leases live (HSI_SLOT_LEASE_DIR); None = the system temp dir's hsi-llm-slots.
    slot_lease_dir: str | None = None
    # Where the schema probe's pass is shared across processes (HSI_PROBE_CACHE_DIR); None = the run's Dagster
    # instance storage (instance_probe_cache_dir), or not shared outside a run.
    probe_cache_dir: str | None = None

    _client: LlamaClient | None = PrivateAttr(default=None)
    _instance_probe_cache_dir: str | None = PrivateAttr(default=None)
    _router: LlamaRouter | None = PrivateAttr(default=None)

    @classmethod
    def from_settings(cls, settings: HsiSettings, api_key: Any) -> "LlamaServerResource":
        """The `llm` resource as the settings configure it: `api_key` is dg.EnvVar("LLAMA_API_KEY") in
        `definitions.build_resources` (when set), the plain value in the CLI's in-process uses such as `hsi eval`."""
        return cls(
            urls=settings.llm_urls,
            api_key=api_key,
            read_timeout_seconds=settings.LLM_READ_TIMEOUT_SECONDS,
            startup_timeout_seconds=settings.LLM_STARTUP_TIMEOUT_SECONDS,
            max_output_tokens=settings.NEMOTRON_MAX_OUTPUT_TOKENS,
            fallback_total_slots=settings.PARALLEL,
            fallback_slot_context=configured_slot_context(settings),
            slot_lease_dir=settings.HSI_SLOT_LEASE_DIR,
            probe_cache_dir=settings.HSI_PROBE_CACHE_DIR,
        )

    @property
    def primary_url(self) -> str:
        """The first URL (the only one when there is one; `get_client()`'s when there are several)."""
        if not self.urls:
            raise ValueError("LlamaServerResource.urls is empty: set LLAMA_SERVER_URL")
        return self.urls[0]

    @property
    def routed(self) -> bool:
        """True when there are several servers (requests go through a LlamaRouter)."""
        return len(self.urls) > 1

    def _client_kwargs(self, **overrides: float) -> dict:
        kwargs: dict = {
            "api_key": self.api_key or None,
            "read_timeout": float(self.read_timeout_seconds),
            "startup_timeout": float(self.startup_timeout_seconds),
            "refused_timeout": float(self.refused_timeout_seconds),
            "fallback_total_slots": self.fallback_total_slots,
            "fallback_slot_context": self.fallback_slot_context,
            "slot_lease_dir": self.slot_lease_dir,
            "probe_cache_dir": self.probe_cache_dir or self._instance_probe_cache_dir,
        }
        kwargs.update(overrides)
        return kwargs

    def _build_client(self, **overrides: float) -> LlamaClient:
        return LlamaClient(self.primary_url, **self._client_kwargs(**overrides))

    def _build_router(self, **overrides: float) -> LlamaRouter:
        return LlamaRouter.from_urls(
            self.urls,
            router_options={
                "cooldown_seconds": self.cooldown_seconds,
                "max_cooldown_seconds": self.max_cooldown_seconds,
            },
            **self._client_kwargs(**overrides),
        )

    # --- lifecycle ---
    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._instance_probe_cache_dir = instance_probe_cache_dir(context.instance)
        if self.routed:
            self._router = self._build_router()
            self._client = self._router.clients[0]
        else:
            self._client = self._build_client()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._router is not None:
            self._router.close()
            self._router = None
            self._client = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def get_client(self) -> LlamaClient:
        """The run's client (the first URL's when there are several), or a lazily built one outside a run."""
        if self._client is None:
            with _lazy_lock:
                if self._client is None:
                    if self.routed:
                        self._router = self._build_router()
                        self._client = self._router.clients[0]
                    else:
                        self._client = self._build_client()
        return self._client

    def client(self) -> LlamaClient:
        return self.get_client()

    def get_router(self) -> LlamaRouter | None:
        """The router over every URL (None with a single URL)."""
        if not self.routed:
            return None
        self.get_client()
        return self._router

    # --- delegation ---
    def ensure_ready(self) -> ServerInfo:
        """Health, per-slot context and the schema-enforcement probe (once per process per URL). Several URLs: one
        ready server suffices; slot_context is the smallest of the ready servers, total_slots their sum."""
        router = self.get_router()
        return router.ensure_ready() if router else self.get_client().ensure_ready()

    def model_identity(self, url: str | None = None) -> ModelIdentity | None:
        """What the server at `url` (the one that answered: ChatResult.server_url; default the first) reports as its
        model; None when it reports none. Trust follows the server that answered (core/verdict/trust.py)."""
        router = self.get_router()
        clients = router.clients if router is not None else [self.get_client()]
        wanted = (url or self.primary_url).rstrip("/")
        for client in clients:
            if client.base_url.rstrip("/") == wanted:
                return client.model_identity()
        with LlamaClient(wanted, **self._client_kwargs()) as client:
            return client.model_identity()

    def live_slot_context(self) -> int | None:
        """Per-slot context reported by the server now, or None when it cannot be reached quickly or reports none
        (an OpenAI-compatible server without max_model_len: its context is the configured fallback, and the caller
        falls back to the settings, naming them as the budget's source). Several URLs: the smallest over the
        servers that answer."""
        quick = {"connect_timeout": _PROBE_CONNECT_SECONDS, "read_timeout": _PROBE_READ_SECONDS, "max_tries": 1}
        try:
            if self.routed:
                with self._build_router(**quick) as probe_router:
                    info = probe_router.server_info()
            else:
                with self._build_client(**quick) as probe:
                    info = probe.server_info()
        except LlamaServerError as exc:
            dg.get_dagster_logger().debug(f"live slot context unavailable: {exc}")
            return None
        return None if info.slot_context_configured else info.slot_context

    def chat_json(
        self, messages: list[dict], schema: dict, *, max_tokens: int | None = None, **options: Unpack[ChatOptions]
    ) -> ChatResult:
        """LlamaClient.chat_json (through the router when there are several URLs); max_tokens defaults to
        max_output_tokens."""
        target = self.get_router() or self.get_client()
        return target.chat_json(
            messages, schema, max_tokens=self.max_output_tokens if max_tokens is None else max_tokens, **options
        )

    def count_prompt_tokens(self, messages: list[dict]) -> int:
        """Exact prompt tokens; TokenCountUnavailable (a LlamaServerError) on servers that cannot count them."""
        target = self.get_router() or self.get_client()
        return target.count_prompt_tokens(messages)
