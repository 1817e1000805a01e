"""Child processes for tests and benches: started logged in their own session, stopped as a process group, and
waited on by condition with a deadline that names what was awaited (sized for a loaded 2-core machine)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")


def start_logged(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    """In its own session, so `stop_group` reaches what it starts (run workers, code server children)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def stop_group(process: subprocess.Popen, grace_s: float = 30, first: signal.Signals = signal.SIGINT) -> None:
    """`first` (Ctrl-C by default) for the process group, then SIGKILL for whatever lingers or outlived it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def wait_for(what: str, check: Callable[[], _T | None], timeout: float, interval: float = 0.2) -> _T:
    """Poll `check` until it returns something other than None/False; past `timeout` seconds fail naming `what`
    and the last exception `check` raised (a server not listening yet, a file not written yet). An AssertionError
    (e.g. the process being waited on has died) fails at once."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - kept and reported if the deadline passes
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"waited {timeout:.0f} s for {what}{detail}")
        time.sleep(interval)
