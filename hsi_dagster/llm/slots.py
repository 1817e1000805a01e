"""What this process knows about each llama-server: one `ServerState` per base URL, in one registry.

Why per process and not per client: many `LlamaClient` instances and threads talk to the same server. They must
share one slot limiter, or together they send more completions than the server has slots and the extras queue
inside llama-server while their read timeouts run. The limiter is sized by the server's `total_slots`; the router
(hsi_dagster/llm/router.py) picks among several servers by the limiters' free counts. Across processes (several
Dagster runs at once) a semaphore cannot help: the Dagster concurrency pool sized to PARALLEL bounds those.

The state also caches what `ensure_ready` learned once per process: the server info, the schema-enforcement
verdict, and, for OpenAI-compatible servers, which API it speaks, how prompt tokens can be counted and the model id.
`reset_server_cache` forgets it (e.g. after a server restart), so the next call asks the server again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from hsi_dagster.llm.transport import normalise_url

API_LLAMA = "llama.cpp"
API_OPENAI = "openai"

# How exact prompt token counts are obtained from a server.
TOKENS_LLAMA = "llama"  # /apply-template, then /tokenize {content}
TOKENS_OPENAI = "openai"  # vLLM's /tokenize {messages}
TOKENS_NONE = "none"  # neither: callers budget with the cl100k estimate

# Notified whenever any slot in this process is released: the router waits on it for the first free slot anywhere.
SLOTS_CHANGED = threading.Condition()


@dataclass(frozen=True)
class ServerInfo:
    slot_context: int
    total_slots: int
    model: str
    chat_template: str | None
    build_info: str | None
    api: str = API_LLAMA  # API_OPENAI when llama-server's own endpoints are missing (e.g. vLLM)
    missing_endpoints: tuple[str, ...] = ()


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


@dataclass(eq=False)
class ServerState:
    """Everything this process has learned about one server; None/False means "not known yet: ask"."""

    url: str
    info: ServerInfo | None = None  # set once ensure_ready passed (health, info, schema probe)
    schema_enforced: bool = False  # the enforcement probe's verdict: the random nonce came back
    limiter: SlotLimiter | None = None
    api: str | None = None  # API_LLAMA | API_OPENAI once detected
    token_mode: str | None = None  # TOKENS_* once detected
    openai_model: str | None = None  # model id from /v1/models, sent as `model` in OpenAI mode
    # one ensure_ready at a time per server
    ready_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def size_limiter(self, total_slots: int) -> SlotLimiter:
        """The slot limiter, made with max(1, total_slots) slots unless one exists (it is never resized)."""
        with self._lock:
            if self.limiter is None:
                self.limiter = SlotLimiter(max(1, int(total_slots)))
            return self.limiter

    def forget(self) -> None:
        """Back to "nothing known" (a request holding the old limiter still releases it)."""
        with self._lock:
            self.info = None
            self.schema_enforced = False
            self.limiter = None
            self.api = None
            self.token_mode = None
            self.openai_model = None


class ServerRegistry:
    """The ServerState of each normalised base URL in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, ServerState] = {}

    def state(self, base_url: str) -> ServerState:
        key = normalise_url(base_url)
        with self._lock:
            found = self._states.get(key)
            if found is None:
                found = self._states[key] = ServerState(key)
            return found

    def reset(self, base_url: str | None = None) -> None:
        with self._lock:
            states = list(self._states.values()) if base_url is None else [self._states.get(normalise_url(base_url))]
        for state in states:
            if state is not None:
                state.forget()


SERVERS = ServerRegistry()


def reset_server_cache(base_url: str | None = None) -> None:
    """Forget readiness and the slot limiter of one base URL (all when None), e.g. after a server restart."""
    SERVERS.reset(base_url)


def slot_limiter(base_url: str) -> SlotLimiter | None:
    """The process-wide slot limiter of base_url (None until sized by ensure_ready or a first completion)."""
    return SERVERS.state(base_url).limiter


def slot_semaphore_size(base_url: str) -> int | None:
    """Slots the in-process limiter allows for base_url (None until it has been sized from the server)."""
    limiter = slot_limiter(base_url)
    return limiter.size if limiter else None


def slot_free_count(base_url: str) -> int | None:
    """Slots of base_url free in this process right now (None until the limiter has been sized)."""
    limiter = slot_limiter(base_url)
    return limiter.free if limiter else None
