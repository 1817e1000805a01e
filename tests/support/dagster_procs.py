"""Submit a run the way `dagster job launch` does: through the instance's run coordinator, so the daemon's queue
launches it (the code server and daemon themselves start with tests/support/processes.py)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._cli.job import execute_launch_command
from dagster_shared.cli import WorkspaceOpts


def submit_run(instance: dg.DagsterInstance, workspace: Path, job_name: str) -> dg.DagsterRun:
    """Create a run of `job_name` from the daemon's workspace file (the same location name) and submit it."""
    opts = WorkspaceOpts(workspace=[str(workspace)])
    return execute_launch_command(instance=instance, workspace_opts=opts, job_name=job_name)
