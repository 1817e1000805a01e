"""A real code server and `dagster-daemon` for tests and benches: start them logged, stop their process groups,
and submit a run the way `dagster job launch` does (through the instance's run coordinator, so the daemon's
queue launches it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import dagster as dg
from dagster._cli.job import execute_launch_command
from dagster_shared.cli import WorkspaceOpts


def start_logged(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    """In its own session, so `stop_group` reaches what it starts (run workers, code server children)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def stop_group(process: subprocess.Popen, grace_s: float = 30) -> None:
    """Ctrl-C for the process group, then SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def submit_run(instance: dg.DagsterInstance, workspace: Path, job_name: str) -> dg.DagsterRun:
    """Create a run of `job_name` from the daemon's workspace file (the same location name) and submit it."""
    opts = WorkspaceOpts(workspace=[str(workspace)])
    return execute_launch_command(instance=instance, workspace_opts=opts, job_name=job_name)
