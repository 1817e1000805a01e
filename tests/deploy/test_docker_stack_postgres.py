"""Postgres, Dagster's storage, goes away mid-night and comes back: no window lost, none judged twice, no run left
hanging, and the stack recovers by itself (tests/support/docker_stack.py runs the production images and
deploy/dagster.yaml; docs/DEPLOY.md "Postgres outage" has the figures).

The outage is `docker stop` of the Postgres container, not `docker pause`: a stop is what a crash, an OOM kill, an
upgrade or a reboot of the database looks like to every client (open connections closed, new ones refused, the
name `postgres` gone from the network's DNS), so every Dagster process has to notice and reconnect. A paused
container keeps its TCP connections and its name (the kernel still accepts connections for it): clients only stall
and carry on where they were when it resumes, which tests a slow database, not a lost one.

The `docker_stack` tier: minutes (the stream, the outage, then the LLM on every window).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections import Counter

import pytest

from tests.support.docker_images import docker
from tests.support.docker_stack import DockerStack, night_stream_args, running_stack, wait_for, write_stack_env

pytestmark = pytest.mark.docker_stack

STREAM_SECONDS = float(os.environ.get("HSI_DOCKER_PG_STREAM_SECONDS") or 180)
# Long enough for the daemon's sensor and queue loops to fail many ticks (every 0.5 to 5 s), for files to pile up in
# the inbox and for a run's container to outlast dagster-postgres's own retries (about 6 s); a run container started
# in the outage waits up to 240 s for Postgres in its entry point (deploy/dagster.yaml).
OUTAGE_SECONDS = float(os.environ.get("HSI_DOCKER_PG_OUTAGE_SECONDS") or 60)
# What the Dagster processes log when Postgres is gone (psycopg2 through SQLAlchemy, or the entry point's check).
STORAGE_ERRORS = ("OperationalError", "could not translate host name", "Connection refused", "DAGSTER_PG_HOST=")
IN_FLIGHT = ("STARTED",)  # a run in its container, past its entry point, executing its steps


def storage_error_lines(stack: DockerStack, service: str, since: float) -> list[str]:
    return [line for line in stack.logs(service, tail=4000, since=since).splitlines() if any(
        marker in line for marker in STORAGE_ERRORS
    )]  # fmt: skip


@pytest.mark.timeout(2400)  # images when cold, a 180 s stream, the outage, then the LLM on every window
def test_a_postgres_outage_mid_stream_loses_no_window_and_the_stack_recovers(images, tmp_path):
    stack = DockerStack(images, write_stack_env(tmp_path / "hsi.env"))
    with running_stack(stack):
        stack.stream(*night_stream_args(STREAM_SECONDS))
        streamed = time.monotonic()

        # Postgres goes while windows are being submitted and a run is in its container.
        wait_for(
            "a batch run in flight before the outage",
            lambda: any(run["status"] in IN_FLIGHT for run in stack.batch_runs()),
            timeout=max(60.0, STREAM_SECONDS - OUTAGE_SECONDS - 20),
            interval=2,
        )
        before = Counter(run["status"] for run in stack.batch_runs())
        restarts_before = {service: stack.restart_count(service) for service in stack.services}
        stopped_at = time.time()
        stack.stop("postgres")
        print(f"postgres stopped {time.monotonic() - streamed:.0f} s into the stream; batch runs then: {dict(before)}")

        # The daemon fails its ticks (it logs the storage errors) while detections keep arriving in the inbox.
        failures = wait_for(
            "the daemon logging storage errors",
            lambda: storage_error_lines(stack, "dagster-daemon", stopped_at),
            timeout=OUTAGE_SECONDS,
            interval=2,
        )
        time.sleep(max(0.0, stopped_at + OUTAGE_SECONDS - time.time()))  # the outage's length is the experiment
        waiting = stack.inbox_waiting()
        during = {service: stack.running(service) for service in stack.services}
        print(f"during the outage: {len(waiting)} inbox files waiting, services running: {during}")
        print("daemon during the outage:\n  " + "\n  ".join(dict.fromkeys(line[:240] for line in failures[:8])))
        assert waiting, "no detections waited in the inbox during the outage: was the stream still running?"

        stack.start("postgres")
        back_at = time.time()
        stack.wait_healthy("postgres", timeout=300)
        # Webserver and daemon come back by themselves: GraphQL answers, the sensor and queue daemons heartbeat.
        wait_for("daemon healthy after the outage", stack.daemon_healthy, timeout=600, interval=2)
        healthy_at = time.time()
        wait_for("the inbox loaded after the outage", lambda: not (waiting & stack.inbox_waiting()), 600, interval=2)
        loaded_at = time.time()

        docker("wait", stack.name("simulator"), timeout=600)
        expected, detections = stack.expected_windows(tmp_path / "inbox")
        expected_ids = {batch.batch_id for batch in expected}
        assert len(expected) >= 3
        stack.wait_all_assessed(expected_ids, timeout=1500)

        # Every closed window assessed exactly once (one row, one successful run), every detection stored.
        rows = stack.assessed_exactly_once(expected_ids, detections)
        # Every run Dagster has for those windows succeeded: none failed for the outage, none hangs.
        runs = stack.batch_runs()
        unsuccessful = [(run["runId"][:8], run["status"], run["tags"].get("dagster/partition")) for run in runs
                        if run["status"] != "SUCCESS"]  # fmt: skip
        assert not unsuccessful, unsuccessful
        assert {run["tags"]["dagster/partition"] for run in runs} == expected_ids

        # Runs whose container died in the outage were resumed in a new container (run_monitoring's
        # max_resume_run_attempts in deploy/dagster.yaml): what the first one said before it exited.
        for run_id, containers in stack.run_workers().items():
            if len(containers) > 1:
                code = docker("inspect", "--format", "{{.State.ExitCode}}", containers[0]).strip()
                tail = subprocess.run(["docker", "logs", "--tail", "4", containers[0]], capture_output=True, text=True)
                print(f"run {run_id[:8]}: {len(containers)} containers, the first exited {code}:")
                print("  " + "\n  ".join(line[:240] for line in (tail.stdout + tail.stderr).splitlines()))

        # No service was restarted by hand; say which ones the engine's restart policy restarted.
        restarts = {service: stack.restart_count(service) - restarts_before[service] for service in stack.services}
        print(f"restarts by the restart policy during the outage: {restarts}")
        assert all(stack.running(service) for service in stack.services), {s: stack.running(s) for s in stack.services}

        # The figures of docs/DEPLOY.md: how long runs waited, how long until the stack was back.
        closes = {batch.batch_id: batch.closes_at.timestamp() for batch in expected}
        closed_in_outage = [batch_id for batch_id, closed in closes.items() if stopped_at <= closed <= back_at]
        queue_waits = [run["startTime"] - run["creationTime"] for run in runs if run["startTime"]]
        first_after = min((run["creationTime"] for run in runs if run["creationTime"] > back_at), default=None)
        stored = {row[0]: row[2] for row in rows}
        print(
            f"postgres back -> daemon healthy {healthy_at - back_at:.1f} s, -> waiting inbox files loaded "
            f"{loaded_at - back_at:.1f} s, -> first run created "
            f"{(first_after - back_at) if first_after else float('nan'):.1f} s; run queue wait (created -> started) "
            f"median {statistics.median(queue_waits):.1f} s, max {max(queue_waits):.1f} s "
            f"over {len(queue_waits)} runs; "
            f"{len(closed_in_outage)} windows closed during the outage, closed -> stored "
            f"{sorted(round(stored[b] - closes[b]) for b in closed_in_outage)} s"
        )
