"""What this process knows about each llama-server: one `ServerState` per base URL, in one registry.

Why per process and not per client: many `LlamaClient` instances and threads talk to the same server. They must
share one slot limiter, or together they send more completions than the server has slots and the extras queue
inside llama-server while their read timeouts run. The limiter is sized by the server's `total_slots`; the router
(hsi_dagster/llm/router.py) picks among several servers by the limiters' free counts.

Across processes (daemon-launched runs, `dagster asset materialize`, `dg launch`, `hsi process` workers, `hsi eval`,
all at once) a semaphore cannot help, and a Dagster pool binds only the runs the daemon's queue launches. So every
completion also holds a `SlotLease`: one of `total_slots` lock files per server URL in a directory every process
shares (HSI_SLOT_LEASE_DIR; default `<system temp dir>/hsi-llm-slots`), held with flock(2) for the request. The
kernel drops a lock when its process dies, however it dies, so a killed run never leaks a slot.

The state also caches what `ensure_ready` learned once per process: the server info, the schema-enforcement
verdict, and, for OpenAI-compatible servers, which API it speaks, how prompt tokens can be counted and the model id.
`reset_server_cache` forgets it (e.g. after a server restart), so the next call asks the server again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import random
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hsi_dagster.llm.transport import normalise_url

API_LLAMA = "llama.cpp"
API_OPENAI = "openai"

# How exact prompt token counts are obtained from a server.
TOKENS_LLAMA = "llama"  # /apply-template, then /tokenize {content}
TOKENS_OPENAI = "openai"  # vLLM's /tokenize {messages}
TOKENS_NONE = "none"  # neither: callers budget with the cl100k estimate

logger = logging.getLogger("hsi_dagster.llm")

# Where slot leases live unless HSI_SLOT_LEASE_DIR says otherwise: one directory per machine, whoever runs the process.
LEASE_DIR_NAME = "hsi-llm-slots"
_LEASE_POLL_FIRST = 0.005  # seconds between tries while every lease is held: doubling up to _LEASE_POLL_MAX
_LEASE_POLL_MAX = 0.05

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
    # True when slot_context is the configured fallback (CTX_SIZE / PARALLEL), not a figure the server reported: an
    # OpenAI-compatible server whose /v1/models has no max_model_len. Budgets then say they came from the settings.
    slot_context_configured: bool = False


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


def default_lease_dir() -> Path:
    """`<system temp dir>/hsi-llm-slots`: the same for every process of this machine that keeps TMPDIR alone."""
    return Path(tempfile.gettempdir()) / LEASE_DIR_NAME


class SlotLeaseError(RuntimeError):
    """The lease directory cannot be used (not creatable, not writable): fix HSI_SLOT_LEASE_DIR."""


class SlotLease:
    """One of `size` cross-process slots of one server: lock files `<dir>/<host_port>-<hash>.slot<i>.lock`.

    `acquire` takes a free one with a non-blocking flock (trying the files from a random start, so processes spread
    over them) and, while all are held, tries again after short, doubling, jittered sleeps (5 to 50 ms: a handover
    costs at most that, against completions of seconds). flock locks belong to the open file, so two threads of one
    process exclude each other too. Stateless apart from the path: make one per request if convenient.
    """

    _made_dirs: set[str] = set()
    _made_dirs_lock = threading.Lock()

    def __init__(self, directory: str | os.PathLike[str] | None, url: str, size: int) -> None:
        if size < 1:
            raise ValueError("a slot lease needs at least one slot")
        self.directory = Path(directory) if directory else default_lease_dir()
        self.url = normalise_url(url)
        self.size = int(size)
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        readable = re.sub(r"[^A-Za-z0-9.]+", "_", self.url.split("://", 1)[-1]).strip("_")[:48]
        self._stem = f"{readable}-{digest}"

    def path(self, index: int) -> Path:
        return self.directory / f"{self._stem}.slot{index}.lock"

    def _ensure_directory(self) -> None:
        key = str(self.directory)
        if key in SlotLease._made_dirs:
            return
        with SlotLease._made_dirs_lock:
            try:
                if not self.directory.is_dir():
                    self.directory.mkdir(parents=True, exist_ok=True)
                    if self.directory == default_lease_dir():
                        # Shared by every user's processes on this machine, like /tmp itself (sticky: no one deletes
                        # another's files). Best effort: a directory someone else made keeps its mode.
                        with contextlib.suppress(OSError):
                            os.chmod(self.directory, 0o1777)
            except OSError as exc:
                raise SlotLeaseError(
                    f"cannot create the LLM slot lease directory {self.directory} ({exc}); set HSI_SLOT_LEASE_DIR to a "
                    "directory every process that talks to the server can write"
                ) from None
            SlotLease._made_dirs.add(key)

    def try_acquire(self) -> int | None:
        """A held lease (an open file descriptor to pass to `release`), or None when all `size` are held."""
        self._ensure_directory()
        start = random.randrange(self.size)
        for step in range(self.size):
            path = self.path((start + step) % self.size)
            try:
                # Read-only is enough for flock, and works on a lock file another user created.
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as exc:
                raise SlotLeaseError(
                    f"cannot open the LLM slot lease {path} ({exc}); set HSI_SLOT_LEASE_DIR to a directory every "
                    "process that talks to the server can write"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return fd
        return None

    def acquire(self, timeout: float | None = None) -> int | None:
        """Wait for a free lease (up to `timeout` seconds; None = as long as it takes); None when it timed out."""
        fd = self.try_acquire()
        if fd is not None:
            return fd
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _LEASE_POLL_FIRST
        logger.debug("all %d slot lease(s) of %s are held by other processes: waiting", self.size, self.url)
        while True:
            pause = delay * (0.5 + random.random())
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                pause = min(pause, remaining)
            time.sleep(pause)
            fd = self.try_acquire()
            if fd is not None:
                return fd
            delay = min(delay * 2, _LEASE_POLL_MAX)

    @staticmethod
    def release(fd: int) -> None:
        """Give a lease back (closing the file drops the lock)."""
        os.close(fd)

    def held(self) -> int:
        """How many of this server's leases some process holds now: what the router counts as busy across every
        process (a probe that takes each free lock for an instant)."""
        self._ensure_directory()
        count = 0
        for index in range(self.size):
            fd = os.open(self.path(index), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                count += 1
            finally:
                os.close(fd)
        return count

    def __repr__(self) -> str:
        return f"SlotLease({self.url!r}, size={self.size}, directory={str(self.directory)!r})"


class ServerSlot:
    """One completion's hold on a server: this process's SlotLimiter (unless the caller already holds it, as the
    router does), then a cross-process SlotLease. A context manager that can be entered again after each exit, so
    the transport holds it around every try and frees it during a retry's back-off.

    `held`: a lease the caller has already taken (the router takes it when it picks the server): the first entry
    uses it instead of waiting for one; `discard` gives it back if the slot is never entered."""

    def __init__(self, limiter: SlotLimiter | None, lease: SlotLease | None, held: int | None = None) -> None:
        self.limiter = limiter
        self.lease = lease
        self._fd: int | None = held

    def __enter__(self) -> ServerSlot:
        if self.limiter is not None:
            self.limiter.acquire()
        if self.lease is not None and self._fd is None:
            try:
                self._fd = self.lease.acquire()
            except BaseException:
                if self.limiter is not None:
                    self.limiter.release()
                raise
        return self

    def discard(self) -> None:
        """Give back a lease taken before the slot was entered (nothing when none is held)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            SlotLease.release(fd)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                SlotLease.release(fd)
        finally:
            if self.limiter is not None:
                self.limiter.release()


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
