"""Run launch time, RUN_STARTING -> RUN_START, with Dagster's DefaultRunLauncher (the code server spawns an
interpreter per run) against hsi_dagster.instance.launcher.WarmProcessRunLauncher (warm, and with warm_workers: 0 = its
cold path), side by side (issue #17, docs/live-path.md).

Each lane: a temporary DAGSTER_HOME with the repository's dagster.yaml (its `run_launcher` block swapped per lane),
`dagster code-server start -m hsi_dagster.definitions` and `dagster-daemon run` as `dagster dev` runs them, then
`--runs` runs of `partition_retention_job` (the full definitions load, one cheap op: no LLM), one after the other,
`--gap` seconds apart (time for the replacement worker to finish its imports, as between batch windows). Stages come
from each run's event log: RUN_STARTING, Dagster's "Started process for run" engine event, RUN_START.

    flock /tmp/hsi-heavy.lock .venv/bin/python bench/launch_bench.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support: the code server / daemon helpers the launcher test uses

import dagster as dg  # noqa: E402
import yaml  # noqa: E402
from dagster._core.instance import InstanceRef  # noqa: E402

from hsi_dagster.llm.embedded import free_port  # noqa: E402
from hsi_dagster.settings import HsiSettings  # noqa: E402
from tests.support.dagster_procs import submit_run  # noqa: E402
from tests.support.processes import start_logged, stop_group  # noqa: E402

BIN = Path(sys.executable).parent
JOB = "partition_retention_job"
LANES = {
    "default": None,  # no run_launcher block: DefaultRunLauncher
    "warm": {"warm_workers": 1},
    "cold": {"warm_workers": 0},
}


def _lane(name: str, runs: int, gap: float, work: Path) -> list[dict[str, float]]:
    home = work / name
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    config.pop("run_launcher", None)
    if LANES[name] is not None:
        config["run_launcher"] = {
            "module": "hsi_dagster.instance.launcher",
            "class": "WarmProcessRunLauncher",
            "config": LANES[name],
        }
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    env = {key: value for key, value in os.environ.items() if key not in HsiSettings.model_fields}
    env.update(
        DAGSTER_HOME=str(home),
        HSI_ENV_FILE=os.devnull,
        HSI_DUCKDB_PATH=str(home / "absent.duckdb"),  # the retention op finds no database: nothing to prune
        HSI_INBOX_DIR=str(home / "no-inbox"),
        PYTHONUNBUFFERED="1",
        DAGSTER_DISABLE_TELEMETRY="1",
    )
    port = free_port()
    (home / "workspace.yaml").write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: hsi_dagster\n"
    )
    os.environ["DAGSTER_HOME"] = str(home)
    # The storage first: three processes creating a fresh SQLite schema at once race in alembic.
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    code_server = start_logged(
        [str(BIN / "dagster"), "code-server", "start", "-m", "hsi_dagster.definitions", "-h", "127.0.0.1", "-p",
         str(port), "--location-name", "hsi_dagster"],
        env, ROOT, home / "code-server.log",
    )  # fmt: skip
    daemon = start_logged(
        [str(BIN / "dagster-daemon"), "run", "-w", str(home / "workspace.yaml")], env, ROOT, home / "daemon.log"
    )
    stages = []
    try:
        deadline = time.monotonic() + 180
        while "QueuedRunCoordinatorDaemon" not in (home / "daemon.log").read_text(errors="replace") or (
            "Started Dagster code server" not in (home / "code-server.log").read_text(errors="replace")
        ):
            assert daemon.poll() is None and code_server.poll() is None, (home / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"{name}: daemon or code server not up"
            time.sleep(0.3)
        time.sleep(gap)
        for _ in range(runs):
            run_id = submit_run(instance, home / "workspace.yaml", JOB).run_id
            while not (run := instance.get_run_by_id(run_id)) or not run.is_finished:
                assert time.monotonic() < deadline + 600, f"{name}: run {run_id} did not finish"
                time.sleep(0.1)
            errors = [e.message for e in instance.all_logs(run_id) if e.level >= 40]  # logging.ERROR
            assert run.status == dg.DagsterRunStatus.SUCCESS, (
                f"{name}: run {run_id} {run.status}: {errors}\n{(home / 'daemon.log').read_text()[-3000:]}"
            )
            at: dict[str, float] = {}
            for entry in instance.all_logs(run_id):
                event = entry.dagster_event
                if event and event.event_type_value in ("PIPELINE_STARTING", "PIPELINE_START"):
                    at.setdefault(event.event_type_value, entry.timestamp)
                elif entry.message.startswith("Started process for run"):
                    at.setdefault("process", entry.timestamp)
                elif "worker process (pid" in entry.message:
                    at["warm"] = float(" warm worker" in entry.message)
            pid = run.tags.get("hsi/run_worker_pid")
            log = (home / "daemon.log").read_text(errors="replace")
            stale = bool(pid) and f"(pid {pid}): code changed since pre-load" in log  # files edited meanwhile
            stages.append(
                {
                    "starting_to_start": at["PIPELINE_START"] - at["PIPELINE_STARTING"],
                    "starting_to_process": at["process"] - at["PIPELINE_STARTING"],
                    "warm": at.get("warm", 0.0) * (not stale),
                    "stale": float(stale),
                }
            )
            time.sleep(gap)
    finally:
        stop_group(daemon)
        stop_group(code_server)
        instance.dispose()
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--gap", type=float, default=4.0, help="seconds between runs")
    parser.add_argument("--lanes", default="default,warm,cold")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, Dagster homes)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results = {}
    tmp = Path(tempfile.mkdtemp(prefix="launch-bench-"))
    try:
        for name in args.lanes.split(","):
            results[name] = _lane(name, args.runs, args.gap, tmp)
            values = " ".join(f"{s['starting_to_start']:.2f}" for s in results[name])
            print(f"{name:8s} RUN_STARTING -> RUN_START per run: {values}", flush=True)
    finally:
        if args.keep:
            print(f"work directory (kept): {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average at start {load:.2f}, at end {os.getloadavg()[0]:.2f}; {args.runs} runs of {JOB} per lane")
    print(f"{'lane':8s} {'median':>8s} {'min':>6s} {'max':>6s} {'-> process':>11s} {'warm runs':>10s} {'stale':>6s}")
    for name, stages in results.items():
        total = [s["starting_to_start"] for s in stages]
        process = [s["starting_to_process"] for s in stages]
        warm, stale = sum(int(s["warm"]) for s in stages), sum(int(s["stale"]) for s in stages)
        print(
            f"{name:8s} {statistics.median(total):8.2f} {min(total):6.2f} {max(total):6.2f} "
            f"{statistics.median(process):11.2f} {warm:>6d}/{len(stages)} {stale:>6d}"
        )
        if 0 < warm < len(stages):
            only = [s["starting_to_start"] for s in stages if s["warm"]]
            print(f"{'':8s} {statistics.median(only):8.2f}  (median of the {warm} runs in a warm, current worker)")
    print("stale: runs whose worker found project files edited after its pre-load and re-executed cold")
    if "default" in results and "warm" in results:
        default = statistics.median(s["starting_to_start"] for s in results["default"])
        warm_median = statistics.median(s["starting_to_start"] for s in results["warm"])
        print(f"\nwarm / default: {warm_median / default:.2f} ({default - warm_median:.2f} s less per run, median)")


if __name__ == "__main__":
    main()
