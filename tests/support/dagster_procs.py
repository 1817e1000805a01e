"""A real code server for tests and benches, started so that it answers before anything loads a workspace that
points at it; and a run submitted the way `dagster job launch` does (through the instance's run coordinator, so
the daemon's queue launches it). Processes start and stop with tests/support/processes.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg
from dagster._cli.job import execute_launch_command
from dagster._grpc.client import DagsterGrpcClient
from dagster_shared.cli import WorkspaceOpts

from tests.support.processes import start_logged, stop_group, wait_for

BIN = Path(sys.executable).parent


def start_code_server(
    location: list[str], port: int, env: dict[str, str], cwd: Path, log: Path, timeout: float
) -> subprocess.Popen:
    """`dagster code-server start <location> -h 127.0.0.1 -p port`, returned once it answers gRPC pings. A daemon
    that loads its workspace while the server still imports keeps the location in error until its next workspace
    refresh, so runs fail to launch: start the daemon after this."""
    argv = [str(BIN / "dagster"), "code-server", "start", *location, "-h", "127.0.0.1", "-p", str(port)]
    server = start_logged(argv, env, cwd, log)

    def serving() -> bool:
        assert server.poll() is None, log.read_text(errors="replace")[-3000:]
        return DagsterGrpcClient(port=port, host="127.0.0.1").ping("hello") is not None

    try:
        wait_for(f"the code server to answer gRPC pings on 127.0.0.1:{port} (log: {log})", serving, timeout, 0.5)
    except BaseException:
        stop_group(server)
        raise
    return server


def submit_run(instance: dg.DagsterInstance, workspace: Path, job_name: str) -> dg.DagsterRun:
    """Create a run of `job_name` from the daemon's workspace file (the same location name) and submit it."""
    opts = WorkspaceOpts(workspace=[str(workspace)])
    return execute_launch_command(instance=instance, workspace_opts=opts, job_name=job_name)
