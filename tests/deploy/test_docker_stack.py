"""The production stack, run for real on a Docker engine: the images of docker-compose.prod.yml built from their
Dockerfiles (local bases, tests/support/docker_images.py), the same deploy/dagster.yaml (Postgres storage, the 0.5 s
run queue, DockerRunLauncher), two CPU llama-servers behind the router, a live simulated night streamed into the
inbox on the volume and three faults while it streams: Postgres stopped for 30 s, the daemon restarted, a
llama-server killed (tests/support/docker_stack.py; docs/DEPLOY.md has the figures).

The outage is `docker stop` of the Postgres container, not `docker pause`: a stop is what a crash, an OOM kill, an
upgrade or a reboot of the database looks like to every client (open connections closed, new ones refused, the
name `postgres` gone from the network's DNS), so every Dagster process has to notice and reconnect. A paused
container keeps its TCP connections and its name (the kernel still accepts connections for it): clients only stall
and carry on where they were when it resumes, which tests a slow database, not a lost one.

The faults share one night (one stack, one stream) because the LLM is what a night costs here: two one-thread
SmolLM2 servers take 26 s to 80 s per window, and a night per fault was most of .ci/run's time.

Skipped only when no engine answers and not in CI (CI=true: an absent engine is a failure). .ci/run installs
docker.io and starts dockerd. Takes minutes: the `docker_stack` tier.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections import Counter
from typing import Any

import pytest

from tests.support.docker_images import docker
from tests.support.docker_stack import (
    DockerStack,
    ServiceFailedToStart,
    night_stream_args,
    running_stack,
    wait_for,
    write_stack_env,
)

pytestmark = pytest.mark.docker_stack

# The stream of record (night_stream_args) for 120 s: 7 windows, as many as in 150 s. The faults, one after the other:
# Postgres stopped as soon as a batch run is in its container (a fast-path window's, some 6 s in), for 30 s (long
# enough for the daemon's sensor and queue loops to fail many ticks, for files to pile up in the inbox and for a run's
# container to outlast dagster-postgres's own retries, about 6 s; no run starts meanwhile, so every second of it is
# a second of idle llama-servers); the daemon restarted at 60 % of the stream, once the stack is back; one
# llama-server killed at 85 %, started again once the other has judged a window alone.
STREAM_SECONDS = float(os.environ.get("HSI_DOCKER_STREAM_SECONDS") or 120)
OUTAGE_SECONDS = float(os.environ.get("HSI_DOCKER_PG_OUTAGE_SECONDS") or 30)
RESTART_DAEMON_AFTER_S = 0.6 * STREAM_SECONDS
KILL_LLAMA_AFTER_S = 0.85 * STREAM_SECONDS
# What the Dagster processes log when Postgres is gone (psycopg2 through SQLAlchemy, or the entry point's check).
STORAGE_ERRORS = ("OperationalError", "could not translate host name", "Connection refused", "DAGSTER_PG_HOST=")


def run_command(image: str, options: list[str], command: list[str]) -> tuple[int, str]:
    """Exit code and output of a one-shot container of `image` (no network)."""
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network=none", "--label=io.hsi.stack=test", *options, image, *command],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.timeout(1500)  # the first test of the module builds the images
def test_services_refuse_to_start_on_bad_settings_naming_the_setting(images, tmp_path):
    env = write_stack_env(tmp_path / "hsi.env")
    env.chmod(0o644)
    mount = f"--volume={env}:/run/hsi/hsi.env:ro"
    # No hsi.env where HSI_ENV_FILE points: the Dagster image (every service and run container) and the llama-server.
    for image, command in ((images.dagster, ["dagster-daemon", "run"]), (images.llama, [])):
        code, output = run_command(image, [], command)
        assert code == 2 and "HSI_ENV_FILE=/run/hsi/hsi.env: no such file" in output, output
    # An hsi.env the service's user cannot read.
    unreadable = tmp_path / "private.env"
    unreadable.write_text(env.read_text())
    unreadable.chmod(0o600)
    code, output = run_command(
        images.dagster, [f"--volume={unreadable}:/run/hsi/hsi.env:ro"], ["dagster-daemon", "run"]
    )
    assert code == 2 and "HSI_ENV_FILE=/run/hsi/hsi.env is not a file readable by uid 10002" in output, output
    # A llama-server image without its model.
    code, output = run_command(images.llama, [mount, "--env=MODEL_PATH=/models/missing.gguf"], [])
    assert code == 2 and "MODEL_PATH='/models/missing.gguf'" in output, output
    # Postgres not reachable: the service exits naming DAGSTER_PG_HOST (its restart policy tries again).
    code, output = run_command(
        images.dagster, [mount, "--env=DAGSTER_PG_HOST=postgres", "--env=DAGSTER_PG_WAIT_SECONDS=2"],
        ["dagster-daemon", "run"],
    )  # fmt: skip
    assert code == 3 and "DAGSTER_PG_HOST=postgres: Postgres does not answer" in output, output


def storage_error_lines(stack: DockerStack, service: str, since: float) -> list[str]:
    return [line for line in stack.logs(service, tail=4000, since=since).splitlines() if any(
        marker in line for marker in STORAGE_ERRORS
    )]  # fmt: skip


def root_run_id(run: dict[str, Any]) -> str:
    """The first run of a run's retry chain (Dagster tags a re-execution with it; the first run has no tag)."""
    return run["tags"].get("dagster/root_run_id", run["runId"])


def postgres_outage(stack: DockerStack) -> dict[str, float]:
    """Stop Postgres while a batch run is in its container, keep it away OUTAGE_SECONDS while detections land in the
    inbox, start it again and wait until the stack is back by itself; returns when each step happened (epoch s)."""
    wait_for(
        "a batch run in flight before the outage",
        lambda: any(run["status"] == "STARTED" for run in stack.batch_runs()),
        timeout=max(60.0, STREAM_SECONDS - OUTAGE_SECONDS - 20),
        interval=2,
    )
    before = Counter(run["status"] for run in stack.batch_runs())
    restarts_before = {service: stack.restart_count(service) for service in stack.services}
    stopped_at = time.time()
    stack.stop("postgres")
    print(f"postgres stopped; batch runs then: {dict(before)}")

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
    # Nothing was restarted by hand; say which services the engine's restart policy restarted.
    restarts = {service: stack.restart_count(service) - restarts_before[service] for service in stack.services}
    print(f"restarts by the restart policy during the outage: {restarts}")
    assert all(during[service] for service in stack.services if service != "postgres"), during
    return {"stopped": stopped_at, "back": back_at, "healthy": healthy_at, "loaded": loaded_at}


@pytest.mark.timeout(2400)  # images (cold: minutes), a 120 s stream, the outage's backlog, the last windows
def test_the_stack_judges_a_live_night_through_faults(images, tmp_path):
    stack = DockerStack(images, write_stack_env(tmp_path / "hsi.env"))
    with running_stack(stack):
        print(f"stack up (s): { {k: round(v, 1) for k, v in stack.timings.items()} }")
        started, streamed_at = time.monotonic(), time.time()
        stack.stream(*night_stream_args(STREAM_SECONDS))

        # Postgres, Dagster's storage, goes while windows are being submitted and a run is in its container.
        outage = postgres_outage(stack)
        print(f"postgres stopped {outage['stopped'] - streamed_at:.0f} s into the stream")

        # The daemon restarted mid-stream: sensor cursors and the queue are in Postgres.
        time.sleep(max(0.0, RESTART_DAEMON_AFTER_S - (time.monotonic() - started)))
        daemon_started = stack.started_at("dagster-daemon")
        stack.restart("dagster-daemon")
        assert stack.started_at("dagster-daemon") != daemon_started

        # One llama-server killed mid-stream: the router must send everything to the other one. Once a window is
        # judged while it is down, it comes back (as an operator or an orchestrator would start it) and takes its
        # share of the rest.
        time.sleep(max(0.0, KILL_LLAMA_AFTER_S - (time.monotonic() - started)))
        before_kill = stack.llama_prompt_tokens("ai-llm-b")
        stack.kill("ai-llm-a")
        killed_at = time.time()
        judged_alone = wait_for(
            "a window judged while ai-llm-a is down",
            lambda: stack.duckdb_rows(  # asked after the kill: the LLM call began after it (latency_ms is its time)
                f"SELECT batch_id FROM risk_assessments WHERE epoch(assessed_at) - latency_ms / 1000 > {killed_at}"
            ),
            timeout=900,
            interval=5,
        )
        assert not stack.running("ai-llm-a")
        assert stack.llama_prompt_tokens("ai-llm-b") > before_kill, "the window judged alone was not ai-llm-b's"
        print(f"ai-llm-a down {time.time() - killed_at:.0f} s; judged by ai-llm-b meanwhile: {judged_alone}")
        stack.start("ai-llm-a")
        stack.wait_healthy("ai-llm-a", timeout=300)

        docker("wait", stack.name("simulator"), timeout=600)
        expected, detections = stack.expected_windows(tmp_path / "inbox")
        expected_ids = {batch.batch_id for batch in expected}
        last_close = max(batch.closes_at.timestamp() for batch in expected)
        print(
            f"stream: {detections} detections, {len(expected)} windows, last closes in {last_close - time.time():.0f} s"
        )
        assert len(expected) >= 3

        stack.wait_all_assessed(expected_ids, timeout=1500)

        # Every closed window assessed exactly once: one row, one successful run, no row for anything else.
        rows = stack.assessed_exactly_once(expected_ids, detections)
        # Every batch run succeeded, or failed for a fault and was executed again by Dagster (run_retries in
        # deploy/dagster.yaml) with success: none is left failed, none hangs. A failed run says which fault it met.
        runs = stack.batch_runs()
        failed = [run for run in runs if run["status"] != "SUCCESS"]
        for run in failed:
            print(stack.describe_run(run))
        succeeded_roots = {root_run_id(run) for run in runs if run["status"] == "SUCCESS"}
        retried = {run["runId"] for run in failed if run["status"] == "FAILURE" and root_run_id(run) in succeeded_roots}
        assert {run["runId"] for run in failed} == retried, "runs left failed or unfinished: printed above"
        assert {run["tags"]["dagster/partition"] for run in runs} == expected_ids

        # Each run in its own container: the launcher's tag and the engine's label agree, one container per run (a
        # run whose container died with Postgres gone is resumed in a new one: run_monitoring's
        # max_resume_run_attempts in deploy/dagster.yaml; the tag then names the new container). A run whose launch
        # met the outage may have failed before its container was tagged (or started): it was retried above.
        tagged = {run["runId"]: run["tags"].get("docker/container_id") for run in stack.runs()}
        untagged = {run_id for run_id, container in tagged.items() if not container}
        assert untagged <= retried, untagged
        engine = {run_id: container for run_id, container in stack.run_containers().items() if run_id not in untagged}
        assert {run_id: container for run_id, container in tagged.items() if container} == engine
        assert len(set(engine.values())) == len(engine)
        for run_id, containers in stack.run_workers().items():
            if len(containers) > 1:
                code = docker("inspect", "--format", "{{.State.ExitCode}}", containers[0]).strip()
                tail = subprocess.run(["docker", "logs", "--tail", "4", containers[0]], capture_output=True, text=True)
                print(f"run {run_id[:8]}: {len(containers)} containers, the first exited {code}:")
                print("  " + "\n  ".join(line[:240] for line in (tail.stdout + tail.stderr).splitlines()))

        # Every service is up at the end, the restarted llama-server too.
        up = {service: stack.running(service) for service in stack.services}
        assert all(up.values()), up

        # The figures of docs/DEPLOY.md: how long runs waited, how long until the stack was back after the outage,
        # and window closed -> row stored, minus LLM time (bench/docker_bench.py measures it without faults).
        closes = {batch.batch_id: batch.closes_at.timestamp() for batch in expected}
        closed_in_outage = [b for b, closed in closes.items() if outage["stopped"] <= closed <= outage["back"]]
        queue_waits = [run["startTime"] - run["creationTime"] for run in runs if run["startTime"]]
        first_after = min((run["creationTime"] for run in runs if run["creationTime"] > outage["back"]), default=None)
        stored = {row[0]: row[2] for row in rows}
        overhead = [row[2] - closes[row[0]] - (row[3] or 0) / 1000 for row in rows]
        print(
            f"postgres back -> daemon healthy {outage['healthy'] - outage['back']:.1f} s, -> waiting inbox files "
            f"loaded {outage['loaded'] - outage['back']:.1f} s, -> first run created "
            f"{(first_after - outage['back']) if first_after else float('nan'):.1f} s; "
            f"{len(closed_in_outage)} windows closed during the outage, closed -> stored "
            f"{sorted(round(stored[b] - closes[b]) for b in closed_in_outage)} s; run queue wait (created -> started) "
            f"median {statistics.median(queue_waits):.1f} s, max {max(queue_waits):.1f} s over {len(queue_waits)} "
            f"runs; overhead (closed -> stored - LLM) median {statistics.median(overhead):.2f} s, max "
            f"{max(overhead):.2f} s; LLM per window median {statistics.median((r[3] or 0) / 1000 for r in rows):.1f} s"
        )

        left = stack.down()
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    for kind in ("network", "volume"):
        names = docker(kind, "ls", "--format", "{{.Name}}").split()
        assert not [name for name in names if name.startswith("hsi_")], names


def test_teardown_of_a_failed_start_leaves_nothing(images, tmp_path):
    """A stack whose start fails (no Postgres password) fails at once, naming the setting, and still leaves no
    container, network or volume."""
    env = tmp_path / "hsi.env"
    env.write_text("DAGSTER_PG_USERNAME=dagster\nDAGSTER_PG_DB=dagster\n")
    stack = DockerStack(images, env)
    with pytest.raises(ServiceFailedToStart, match="DAGSTER_PG_PASSWORD"), running_stack(stack, timeout=60):
        pass
    assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}
