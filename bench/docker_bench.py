"""The production stack's figures on this machine (issue 26): image sizes, cold and warm build times, stack start
time, the per-run price of a container (RUN_STARTING -> RUN_START with DockerRunLauncher, against the local warm
launcher of bench/launch_bench.py), and the live overhead through the stack (window closed -> row stored, minus the
LLM's time).

    flock /tmp/hsi-heavy.lock .venv/bin/python bench/docker_bench.py [--cold] [--runs 7] [--seconds 120] [--json OUT]

--cold first removes the stack's images, the local base images and the engine's dangling layers (and re-downloads
nothing: the wheelhouse stays, its own time is printed as measured). The stack and the stream are those of
tests/deploy/test_docker_stack.py (tests/support/docker_images.py, tests/support/docker_stack.py), without faults.
Launch runs: `partition_retention_job` (the whole definitions load, one cheap op, no LLM) submitted through the
webserver's GraphQL one after another, `--gap` seconds apart, as launch_bench does for the local launchers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the image builder and the stack driver the test uses

from tests.support.docker_images import (  # noqa: E402
    LOCAL_DEBIAN,
    LOCAL_PYTHON,
    BuildLog,
    StackImages,
    build_stack_images,
    docker,
    image_size_mb,
)
from tests.support.docker_stack import DockerStack, running_stack, wait_for, write_stack_env  # noqa: E402

LAUNCH_JOB = "partition_retention_job"
STREAM = ("--seed", "7", "--activity-start", "2026-12-03T15:00:00Z")


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def remove_images(images: StackImages) -> None:
    for name in (images.dagster, images.llama, images.postgres, LOCAL_PYTHON, LOCAL_DEBIAN):
        docker("image", "rm", "-f", name, check=False)
    docker("image", "prune", "-f", check=False)


def run_stages(stack: DockerStack, run_id: str) -> dict[str, float]:
    """Seconds between a run's launch events: queued -> RUN_STARTING (the daemon dequeued it) -> container launched
    (DockerRunLauncher's engine event) -> RUN_START (the run's process in the container started executing)."""
    times: dict[str, float] = {}
    for event in stack.run_events(run_id):
        kind, message = event["__typename"], event.get("message") or ""
        stamp = int(event["timestamp"]) / 1000
        if kind == "RunEnqueuedEvent":
            times.setdefault("enqueued", stamp)
        elif kind == "RunStartingEvent":
            times.setdefault("starting", stamp)
        elif kind == "EngineEvent" and message.startswith("Launching run in a new container"):
            times.setdefault("container", stamp)
        elif kind == "RunStartEvent":
            times.setdefault("start", stamp)
        elif kind == "RunSuccessEvent":
            times.setdefault("success", stamp)
    stages = {}
    for name, (a, b) in {
        "queue (enqueued -> RUN_STARTING)": ("enqueued", "starting"),
        "RUN_STARTING -> container created": ("starting", "container"),
        "container created -> RUN_START": ("container", "start"),
        "RUN_STARTING -> RUN_START": ("starting", "start"),
        "RUN_START -> success": ("start", "success"),
    }.items():
        if a in times and b in times:
            stages[name] = times[b] - times[a]
    return stages


def launch_figures(stack: DockerStack, runs: int, gap: float) -> dict[str, float | None]:
    per_stage: dict[str, list[float]] = {}
    for _ in range(runs):
        run_id = stack.launch_run(LAUNCH_JOB)

        def finished(run_id: str = run_id) -> bool:
            status = next(run["status"] for run in stack.runs() if run["runId"] == run_id)
            if status in ("FAILURE", "CANCELED"):
                raise RuntimeError(f"run {run_id} ended {status}")
            return status == "SUCCESS"

        wait_for(f"run {run_id} of {LAUNCH_JOB}", finished, timeout=300)
        for name, seconds in run_stages(stack, run_id).items():
            per_stage.setdefault(name, []).append(seconds)
        time.sleep(gap)
    return {name: median(values) for name, values in per_stage.items()}


def live_figures(stack: DockerStack, seconds: float, work: Path) -> dict[str, object]:
    stack.stream("--rate", "0.5", "--seconds", str(seconds), *STREAM)
    docker("wait", stack.name("simulator"), timeout=int(seconds) + 600)
    expected, detections = stack.expected_windows(work / "inbox")
    ids = {batch.batch_id for batch in expected}
    stack.wait_all_assessed(ids, timeout=900)
    rows = stack.duckdb_rows("SELECT batch_id, epoch(assessed_at), latency_ms FROM risk_assessments")
    closes = {batch.batch_id: batch.closes_at.timestamp() for batch in expected}
    to_stored = [row[1] - closes[row[0]] for row in rows if row[0] in closes]
    overhead = [row[1] - closes[row[0]] - (row[2] or 0) / 1000 for row in rows if row[0] in closes]
    return {
        "detections": detections,
        "windows": len(expected),
        "closed -> stored, median s": median(to_stored),
        "overhead (closed -> stored - LLM), median s": median(overhead),
        "overhead max s": round(max(overhead), 2) if overhead else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="remove the images first: a cold build")
    parser.add_argument("--runs", type=int, default=7, help="launch runs (partition_retention_job)")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between launch runs")
    parser.add_argument("--seconds", type=float, default=120, help="length of the live stream (0: none)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()

    images = StackImages()
    figures: dict[str, object] = {}
    if args.cold:
        remove_images(images)
    first = build_stack_images(images, BuildLog())
    figures["build (s), " + ("cold" if args.cold else "as found")] = first.seconds
    figures["build (s), warm (nothing changed)"] = build_stack_images(images, BuildLog()).seconds
    figures["image size (MB)"] = {
        name: round(image_size_mb(name)) for name in (images.dagster, images.llama, images.postgres, LOCAL_PYTHON)
    }
    print(json.dumps(figures, indent=2), flush=True)

    with tempfile.TemporaryDirectory(prefix="hsi-docker-bench-") as tmp:
        work = Path(tmp)
        stack = DockerStack(images, write_stack_env(work / "hsi.env"))
        with running_stack(stack):
            figures["stack start (s)"] = {name: round(value, 1) for name, value in stack.timings.items()}
            print(json.dumps({"stack start (s)": figures["stack start (s)"]}, indent=2), flush=True)
            if args.runs:
                figures["launch, DockerRunLauncher (median s)"] = launch_figures(stack, args.runs, args.gap)
                print(json.dumps({"launch": figures["launch, DockerRunLauncher (median s)"]}, indent=2), flush=True)
            if args.seconds:
                figures["live stream through the stack"] = live_figures(stack, args.seconds, work)
            figures["teardown leftovers"] = stack.down()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
