"""Orchestration overhead per batch and throughput: the sensor + daemon path vs `hsi process`, real parts only.

Run:  .venv/bin/python bench/daemon_bench.py [--waves 3] [--burst 6] [--parallel 2] [--max-tokens 384]

Both paths get the same simulated detections (same batches, same prompts) in their own DuckDB file and Dagster
home, and share one embedded llama.cpp server (PARALLEL slots):
- daemon: `dagster code-server start -m hsi_dagster.definitions` and `dagster-daemon run` pointed at it (as
  `dagster dev` and the production compose file run them; --managed: a daemon that loads the module itself, which
  restarts its code server every 60 s) on a temporary DAGSTER_HOME with the project's dagster.yaml
  (QueuedRunCoordinator, the warm run launcher: pre-started processes, one per run); pool limits set on that instance
  as `hsi` sets them; `batch_window_sensor` is on by default and requests a run per closed window (its tick holds on
  for up to SENSOR_HOLD_SECONDS, planning again after each database write);
- hsi process: the `hsi process` command, started when the windows are visible (as a cron job or a user would).

Phase 1, latency: waves of PARALLEL batches (one per slot, so no batch queues behind another's LLM call), each wave
ingested only when the previous one is stored. Per batch, orchestration overhead = (risk_assessments row stored -
ingest finished) - the row's latency_ms (its LLM time). For the daemon it includes waiting for the sensor tick.
Phase 2, throughput: --burst batches ingested at once; assessments per minute from ingest finished to the last
row stored.

Every process started here (server, daemon and its code server and run processes) is stopped on exit, also on
Ctrl-C or an error. The run takes about 5-10 minutes with SmolLM2 on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: hsi, dagster, dagster-daemon

WAVE_TIMEOUT_S = 600.0


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile (the largest value for fewer than 10 batches)."""
    return sorted(values)[math.ceil(0.9 * len(values)) - 1]


def _stop_group(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM the process group (the daemon's code server and run processes are in it), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


class Lane:
    """One lane's own DuckDB file, Dagster home and environment."""

    def __init__(self, name: str, work: Path, base_env: dict[str, str]) -> None:
        self.name = name
        self.home = work / f"{name}_home"
        self.home.mkdir()
        shutil.copy(ROOT / "dagster.yaml", self.home / "dagster.yaml")
        self.db = str(work / f"{name}.duckdb")
        (work / f"{name}_inbox").mkdir()
        self.env = {
            **base_env,
            "DAGSTER_HOME": str(self.home),
            "HSI_DUCKDB_PATH": self.db,
            "HSI_INBOX_DIR": str(work / f"{name}_inbox"),
        }

    def apply_pool_limits(self) -> None:
        """The pool limits `hsi` sets on its instance (llama_slots = PARALLEL, duckdb_writes = 1)."""
        code = (
            "from hsi_dagster.cli.instance import get_instance; from hsi_dagster.settings import load_settings; "
            "get_instance(load_settings())"
        )
        subprocess.run([sys.executable, "-c", code], env=self.env, cwd=self.home.parent, check=True)

    def ingest(self, lines: list[str]) -> float:
        """Load the wave's detections; returns the wall-clock time when they are visible (epoch seconds)."""
        from hsi_dagster.storage.ingest import ingest_lines

        ingest_lines(self.db, lines)
        return time.time()

    def stored(self, batch_ids: list[str]) -> dict[str, tuple[float, float, str]]:
        """batch_id -> (assessed_at epoch s, latency_ms, status) for the rows already stored."""
        from hsi_dagster.storage.db import connect

        with connect(self.db, read_only=True) as conn:
            rows = conn.execute(
                "SELECT batch_id, epoch(assessed_at), latency_ms, status FROM risk_assessments "
                "WHERE batch_id IN (SELECT unnest(?::VARCHAR[]))",
                [batch_ids],
            ).fetchall()
        return {b: (float(t), float(ms or 0.0), s) for b, t, ms, s in rows}


def batches_of(records: list[dict], scratch_db: str) -> list[tuple[str, list[str]]]:
    """The closed batches of the records in chronological order, each with its detections as JSON lines (ingesting
    them in this order gives every lane the same batches, none of them late)."""
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.settings import load_settings
    from hsi_dagster.storage.batches import pending_closed_batches
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.ingest import ingest_lines

    ingest_lines(scratch_db, [json.dumps(r) for r in records])
    with connect(scratch_db, read_only=True) as conn:
        batches = pending_closed_batches(conn, BatchRules.from_settings(load_settings()), datetime.now(UTC))
    by_id = {r["detection_id"]: json.dumps(r) for r in records}
    return [
        (b.batch_id, [by_id[d] for d in b.detection_ids])
        for b in sorted(batches, key=lambda b: (b.started_at, b.batch_id))
    ]


def group(batches: list[tuple[str, list[str]]]) -> tuple[list[str], list[str]]:
    return [b for b, _ in batches], [line for _, lines in batches for line in lines]


def wait_stored(lane: Lane, batch_ids: list[str], alive: subprocess.Popen | None) -> dict:
    deadline = time.monotonic() + WAVE_TIMEOUT_S
    while True:
        rows = lane.stored(batch_ids)
        if len(rows) == len(batch_ids):
            return rows
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{lane.name}: dagster-daemon exited with {alive.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{lane.name}: {len(rows)}/{len(batch_ids)} assessments after {WAVE_TIMEOUT_S:.0f}s")
        time.sleep(1.0)  # a short read-only connection per second; writers wait out its lock in milliseconds


def wait_first_tick(log_file: Path, daemon: subprocess.Popen, timeout: float = 120.0) -> None:
    """The daemon, its code server and the batch sensor are up (it has ticked once) before any window is visible,
    so start-up is not counted as per-batch overhead."""
    deadline = time.monotonic() + timeout
    while "sensor: batch_window_sensor" not in log_file.read_text(errors="replace"):
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"dagster-daemon did not tick batch_window_sensor (see {log_file})")
        time.sleep(0.5)


def start_daemon(lane: Lane, work: Path, log, *, managed: bool) -> tuple[subprocess.Popen | None, subprocess.Popen]:
    """The code server and the daemon, in the work directory: Dagster loads a `.env` from its working directory into
    the code server's environment, and the repository's `.env` would point the runs at data/hsi.duckdb."""
    from hsi_dagster.llm.embedded import free_port

    def start(argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(
            argv, env=lane.env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    workspace = work / "workspace.yaml"
    code_server = None
    if managed:
        workspace.write_text("load_from:\n  - python_module:\n      module_name: hsi_dagster.definitions\n")
    else:
        port = free_port()
        code_server = start(
            [
                str(BIN / "dagster"),
                "code-server",
                "start",
                "-m",
                "hsi_dagster.definitions",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "--location-name",
                "hsi_dagster",
            ]
        )
        workspace.write_text(
            f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n"
            "      location_name: hsi_dagster\n"
        )
    return code_server, start([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)])


def run_hsi_process(lane: Lane, log) -> None:
    subprocess.run(
        [str(BIN / "hsi"), "process"],
        env=lane.env,
        cwd=lane.home.parent,
        check=True,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def measure(lane: Lane, waves, burst, log, daemon: subprocess.Popen | None) -> dict:
    """Latency waves, then one burst. With daemon=None each wave/burst is processed by `hsi process`."""
    overheads, rows_all = [], {}
    for n, (ids, lines) in enumerate(waves, 1):
        visible = lane.ingest(lines)
        if daemon is None:
            run_hsi_process(lane, log)
        rows = wait_stored(lane, ids, daemon)
        for stored_at, latency_ms, _status in rows.values():
            overheads.append(stored_at - visible - latency_ms / 1000)
        rows_all.update(rows)
        print(
            f"  {lane.name} wave {n}: "
            + ", ".join(
                f"{stored - visible:.1f}s (LLM {ms / 1000:.1f}s, {status})" for stored, ms, status in rows.values()
            ),
            flush=True,
        )
    ids, lines = burst
    visible = lane.ingest(lines)
    if daemon is None:
        run_hsi_process(lane, log)
    rows = wait_stored(lane, ids, daemon)
    burst_s = max(stored for stored, _, _ in rows.values()) - visible
    llm_s = sum(ms for _, ms, _ in rows.values()) / 1000
    statuses = sorted({s for _, _, s in [*rows.values(), *rows_all.values()]})
    print(f"  {lane.name} burst: {len(ids)} batches in {burst_s:.1f}s (sum of LLM time {llm_s:.1f}s)", flush=True)
    return {"overheads": overheads, "burst_s": burst_s, "burst_n": len(ids), "burst_llm_s": llm_s, "statuses": statuses}


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waves", type=int, default=3, help="latency waves of PARALLEL batches each")
    parser.add_argument("--burst", type=int, default=6, help="batches ingested at once for the throughput figure")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--minutes", type=float, default=20.0, help="simulated activity to draw batches from")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases, homes)")
    parser.add_argument(
        "--managed",
        action="store_true",
        help="`dagster-daemon run` loading the module itself (no separate code server)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hsi-daemon-bench-"))
    base_env = {
        **os.environ,
        "HSI_ENV_FILE": os.devnull,
        "CTX_SIZE": str(4096 * args.parallel),
        "PARALLEL": str(args.parallel),
        "THREADS": "2",
        # No inbox folder: batch_window_sensor plans the windows (with one, inbox_sensor does, after its ingest).
        "HSI_INBOX_DIR": str(work / "no-inbox"),
        "NEMOTRON_MAX_OUTPUT_TOKENS": str(args.max_tokens),
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    os.environ.update({k: v for k, v in base_env.items() if k != "DAGSTER_HOME"})
    os.environ["DAGSTER_HOME"] = str(work)  # never the repository's .dagster_home
    from hsi_dagster.llm.embedded import EmbeddedServerProcess
    from hsi_dagster.synthetic.streams import simulate

    # Ctrl-C and SIGTERM both unwind through the finally below.
    signal.signal(signal.SIGTERM, _interrupt)
    server = daemon = code_server = None
    log = open(work / "processes.log", "w")  # noqa: SIM115 - shared by every process started, closed in finally
    try:
        server = EmbeddedServerProcess(port=None, log_path=str(work / "llama.log")).start()
        base_env["LLAMA_SERVER_URL"] = os.environ["LLAMA_SERVER_URL"] = server.url
        start = datetime.now(UTC) - timedelta(hours=3)
        records = list(simulate(11, start=start, duration_s=args.minutes * 60, events_per_hour=30))
        batches = batches_of(records, str(work / "scratch.duckdb"))
        p = args.parallel
        if len(batches) < args.waves * p + args.burst:
            raise SystemExit(f"only {len(batches)} batches in {args.minutes} simulated minutes; raise --minutes")
        waves = [group(batches[i * p : (i + 1) * p]) for i in range(args.waves)]
        burst = group(batches[args.waves * p : args.waves * p + args.burst])
        print(
            f"{len(waves)} waves of {args.parallel} + a burst of {len(burst[0])} batches; "
            f"parallel={args.parallel} max_tokens={args.max_tokens}; work dir {work}",
            flush=True,
        )

        daemon_lane = Lane("daemon", work, base_env)
        daemon_lane.apply_pool_limits()
        code_server, daemon = start_daemon(daemon_lane, work, log, managed=args.managed)
        wait_first_tick(work / "processes.log", daemon)
        print("sensor + daemon:", flush=True)
        daemon_res = measure(daemon_lane, waves, burst, log, daemon)
        _stop_group(daemon)
        if code_server is not None:
            _stop_group(code_server)

        cli_lane = Lane("cli", work, base_env)
        cli_lane.apply_pool_limits()
        print("hsi process:", flush=True)
        cli_res = measure(cli_lane, waves, burst, log, None)
    finally:
        for proc in (daemon, code_server):
            if proc is not None:
                _stop_group(proc)
        if server is not None:
            server.stop()
        log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(
        f"\nbatches per lane: {len(waves) * args.parallel} in latency waves + {len(burst[0])} in the burst; "
        f"parallel={args.parallel} max_tokens={args.max_tokens}"
    )
    for name, res in (("sensor + daemon", daemon_res), ("hsi process", cli_res)):
        o = res["overheads"]
        print(
            f"{name}: orchestration overhead per batch (window visible -> row stored - LLM time) median "
            f"{statistics.median(o):.2f}s, p90 {p90(o):.2f}s over {len(o)} batches; burst throughput "
            f"{res['burst_n'] / res['burst_s'] * 60:.2f} assessments/min ({res['burst_n']} in {res['burst_s']:.1f}s, "
            f"LLM time {res['burst_llm_s']:.1f}s); statuses {', '.join(res['statuses'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
