"""The schema-enforcement probe's verdict, shared by the processes of one Dagster instance.

Every daemon run is a new process, and `LlamaClient.ensure_ready` probes once per process: one extra completion
per batch, 0.4-0.6 s on an idle server and 10-33 s under load (docs/live-path.md). Once a probe passes, a small
file records it, keyed by what identifies the server: base URL, model path, `build_info`, slot count and API.
Later processes that see the same server skip the probe; a different model, build or slot count (a restarted or
replaced server) probes again, and a verdict older than MAX_AGE_SECONDS is probed again too.

Where: the folder the caller passes (`LlamaClient(probe_cache_dir=...)`); this module reads no environment. The
LLM resource passes HSI_PROBE_CACHE_DIR when set, else `<the Dagster instance's storage directory>/hsi-schema-probe`
(INSTANCE_FOLDER: the scope of one instance's runs, `hsi process` included); None = nothing is cached (one probe per
process). Only a pass is recorded, and only for a server that reports its build. A file that cannot be read or
written is a cache miss, never an error.

Runs that start together on a fresh server (a burst of closed windows) would each probe, under load: `probe_once`
holds a lock file beside the verdict while one process probes, and the others wait for its verdict instead of probing
too (they probe themselves if it did not pass).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from hsi_dagster.llm.slots import ServerInfo

logger = logging.getLogger(__name__)

MAX_AGE_SECONDS = 24 * 3600.0
# The folder of verdicts under a Dagster instance's storage directory (the resource's default).
INSTANCE_FOLDER = "hsi-schema-probe"


def server_key(base_url: str, info: ServerInfo) -> dict[str, object] | None:
    """What identifies the server the probe ran against; None if it does not report its build (not cached)."""
    if not info.build_info:
        return None
    return {
        "url": base_url.rstrip("/"),
        "model": info.model,
        "build_info": info.build_info,
        "total_slots": info.total_slots,
        "api": info.api,
    }


def _path(directory: Path, key: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return directory / f"{digest}.json"


def passed(base_url: str, info: ServerInfo, directory: Path | None, *, now: float | None = None) -> bool:
    """True if a process sharing `directory` saw the probe pass on this same server within MAX_AGE_SECONDS."""
    key = server_key(base_url, info)
    if directory is None or key is None:
        return False
    try:
        record = json.loads(_path(directory, key).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("key") != key:
        return False
    age = (time.time() if now is None else now) - float(record.get("passed_at", 0))
    return 0 <= age <= MAX_AGE_SECONDS


def record_pass(base_url: str, info: ServerInfo, directory: Path | None) -> Path | None:
    """Write the verdict (atomically: a reader sees the old file or the new one); returns the file, if written."""
    key = server_key(base_url, info)
    if directory is None or key is None:
        return None
    path = _path(directory, key)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps({"key": key, "passed_at": time.time()}, sort_keys=True))
        os.replace(partial, path)
    except OSError as exc:
        logger.debug("schema probe verdict not cached in %s: %s", directory, exc)
        return None
    return path


def probe_once(base_url: str, info: ServerInfo, directory: Path | None, probe: Callable[[], None]) -> None:
    """Run `probe` (it raises if the server fails it) unless a process sharing `directory` saw it pass on this
    server, or passes it while this one waits for the lock; record the pass for the others."""
    if passed(base_url, info, directory):
        return
    with _exclusive(base_url, info, directory):
        if not passed(base_url, info, directory):
            probe()
            record_pass(base_url, info, directory)


@contextlib.contextmanager
def _exclusive(base_url: str, info: ServerInfo, directory: Path | None) -> Iterator[None]:
    """Hold this server's probe lock (an flock on `<verdict>.lock`) for the body: one prober at a time per folder.
    Nothing is held when nothing would be cached (no folder, no build) or the lock file cannot be opened."""
    key = server_key(base_url, info)
    if directory is None or key is None:
        yield
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(_path(directory, key).with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        logger.debug("schema probe lock not taken in %s: %s", directory, exc)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
