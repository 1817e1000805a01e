"""Load (#15 item 8): a simulated 16-camera stream at 10 x the normal rate for a bounded time, through ingest and
the pipeline on the real embedded llama.cpp server; memory, backlog, losses and duplicates measured.

Run:  flock /tmp/hsi-heavy.lock .venv/bin/python bench/load_bench.py [--cameras 16] [--factor 10] [--seconds 120]
      [--drain 300] [--seed 15] [--parallel 2] [--max-tokens 256] [--json OUT] [--keep]

Rates: the normal rate is `simulate`'s default (synthetic/streams.py): 40 scenario events an hour over its 5
cameras, ~33 detections an event, i.e. 8 events (~264 detections) per camera and hour, ~0.073 detections/s per
camera. --factor 10 with 16 cameras offers 1,280 events an hour: ~7.5 detections/s at night, ~13.5 by day (by
day most confident persons are fast-path batches of their own, so batches arrive at ~1.5/s).

- the stream: wall-clock timestamps, one file a second written into the inbox (hidden name, then renamed), with
  one invalid line every 10th file (they must end in quarantine);
- ingest: each file as it lands, by the library call of `hsi ingest` (storage.ingest.ingest_files), in this
  process;
- pipeline: `hsi process` (its own DAGSTER_HOME, PARALLEL worker processes) started again as soon as the previous
  one ends, as a cron job or a watcher would, during the stream and then for at most --drain seconds;
- sampled every second: RSS of this process (writer + ingest), of the llama.cpp server and of `hsi process` with
  its workers; every 5 s the backlog (closed windows not yet recorded + recorded batches not yet assessed).

Criteria (pass/fail on the summary line): ingest keeps up (max lag file written -> rows stored <= 5 s); memory
bounded (no role's peak RSS in the last third of the run above 1.25 x its first-third peak + 64 MiB; for the
llama.cpp server, whose host-RAM prompt cache fills up to CACHE_RAM_MIB by design, first-third peak + CACHE_RAM_MIB
+ 64 MiB); nothing lost
(every detection stored, every bad line quarantined, each detection in at most one batch); no duplicates (one
assessment row and at most one successful run per batch); backlog drained within --drain (SmolLM2-135M on 2 cores
assesses a few batches a minute, so at 10 x with 16 cameras it is expected NOT to: the figures say by how much).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proc_stats import descendants, load_average  # bench/ is on sys.path when a bench runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.reliability.stream_ledger: the accounting shared with the tests

from hsi_dagster.core.intake.batching import BatchRules, DetectionRef, assign_batches  # noqa: E402
from hsi_dagster.llm.embedded import EmbeddedServerProcess  # noqa: E402
from hsi_dagster.settings import HsiSettings  # noqa: E402
from hsi_dagster.storage.batches import pending_closed_batches  # noqa: E402
from hsi_dagster.storage.db import DatabaseNotFound, connect  # noqa: E402
from hsi_dagster.storage.ingest import ingest_files  # noqa: E402
from hsi_dagster.synthetic.bad_lines import bad_lines  # noqa: E402
from tests.reliability.stream_ledger import (  # noqa: E402
    NORMAL_EVENTS_PER_CAMERA_HOUR,
    cameras,
    ledger,
    per_second,
    rss_kib,
    stream_records,
    write_file,
)

BIN = Path(sys.executable).parent
SLOT_CONTEXT = 4096
BAD_EVERY = 10
MAX_INGEST_LAG_S = 5.0


def _utc(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).astimezone(UTC)


class Stream(threading.Thread):
    """Writes the file of second k at t0 + k + 1 and ingests it at once (lag = ingested - written)."""

    def __init__(self, chunks: list[list[dict]], faults: list[bytes], inbox: Path, db: Path, t0: float) -> None:
        super().__init__(daemon=True, name="stream")
        self.chunks, self.faults, self.inbox, self.db, self.t0 = chunks, faults, inbox, db, t0
        self.lags: list[float] = []
        self.ingest_busy = 0.0
        self.bad_in = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for k, chunk in enumerate(self.chunks):
                time.sleep(max(0.0, self.t0 + k + 1 - time.time()))
                lines: list = list(chunk)
                if k % BAD_EVERY == 0:
                    lines.insert(len(lines) // 2, self.faults[self.bad_in])
                    self.bad_in += 1
                path = write_file(self.inbox, f"live-{k:05d}.jsonl", lines)
                written = time.time()
                ingest_files(self.db, [path])
                done = time.time()
                self.ingest_busy += done - written
                self.lags.append(done - written)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


class Pipeline(threading.Thread):
    """`hsi process` again and again (each one takes every window closed as of its start) until stopped."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        super().__init__(daemon=True, name="pipeline")
        self.env, self.work = env, work
        self.stop_event = threading.Event()
        self.current: subprocess.Popen | None = None
        self.invocations: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        log = open(self.work / "hsi-process.log", "ab")  # noqa: SIM115 - closed below
        try:
            while not self.stop_event.is_set():
                started = time.time()
                with self.lock:
                    if self.stop_event.is_set():
                        break
                    self.current = subprocess.Popen(
                        [str(BIN / "hsi"), "process"], env=self.env, cwd=self.work, stdout=log,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    )  # fmt: skip
                code = self.current.wait()
                self.invocations.append({"started": started, "seconds": time.time() - started, "exit": code})
                self.stop_event.wait(1.0)
        finally:
            log.close()

    def stop(self) -> None:
        with self.lock:
            self.stop_event.set()
            proc = self.current
        if proc is None or proc.poll() is not None:
            return
        family = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(20)
        for pid in family | descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


class Sampler(threading.Thread):
    """RSS per role every second; backlog and counts every 5 s (short read-only queries)."""

    def __init__(self, server_pid: int, pipeline: Pipeline, db: Path, rules: BatchRules) -> None:
        super().__init__(daemon=True, name="sampler")
        self.server_pid, self.pipeline, self.db, self.rules = server_pid, pipeline, db, rules
        self.rss: list[tuple[float, int, int, int]] = []  # (epoch, bench, llama server, hsi process tree) KiB
        self.progress: list[dict[str, Any]] = []
        self.loads: list[float] = []
        self.stop_event = threading.Event()

    def _pipeline_rss(self) -> int:
        proc = self.pipeline.current
        if proc is None or proc.poll() is not None:
            return 0
        return sum(rss_kib(pid) for pid in {proc.pid} | descendants(proc.pid))

    def counts(self) -> dict[str, Any] | None:
        try:
            with connect(self.db, read_only=True, wait_seconds=10) as conn:
                stored, batches, assessments = conn.execute(
                    "SELECT (SELECT count(*) FROM detections), (SELECT count(*) FROM detection_batches), "
                    "(SELECT count(*) FROM risk_assessments)"
                ).fetchone()  # type: ignore[misc]
                pending = len(pending_closed_batches(conn, self.rules, datetime.now(UTC)))
        except (DatabaseNotFound, Exception):  # noqa: BLE001 - tables appear with the first ingest
            return None
        return {
            "t": time.time(),
            "stored": stored,
            "batches": batches,
            "assessments": assessments,
            "pending_windows": pending,
            "backlog": pending + batches - assessments,
        }

    def run(self) -> None:
        tick = 0
        while not self.stop_event.wait(1.0):
            self.rss.append((time.time(), rss_kib(), rss_kib(self.server_pid), self._pipeline_rss()))
            tick += 1
            if tick % 5 == 0:
                self.loads.append(load_average())
                state = self.counts()
                if state:
                    self.progress.append(state)


def memory_figures(rss: list[tuple[float, int, int, int]], cache_ram_mib: int) -> dict[str, Any]:
    roles = ("bench (writer + ingest)", "llama.cpp server", "hsi process + workers")
    allowed_growth = {"llama.cpp server": cache_ram_mib + 64}
    third = max(1, len(rss) // 3)
    out: dict[str, Any] = {}
    bounded = True
    for i, role in enumerate(roles, start=1):
        first = max(s[i] for s in rss[:third]) / 1024
        last = max(s[i] for s in rss[-third:]) / 1024
        peak = max(s[i] for s in rss) / 1024
        ok = last <= first + allowed_growth[role] if role in allowed_growth else last <= 1.25 * first + 64
        bounded &= ok
        out[role] = {"peak_mib": round(peak), "first_third_peak_mib": round(first), "last_third_peak_mib": round(last)}
    out["total_peak_mib"] = round(max(s[1] + s[2] + s[3] for s in rss) / 1024)
    out["bounded"] = bounded
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--factor", type=float, default=10.0, help="x the normal rate per camera")
    parser.add_argument("--seconds", type=int, default=120, help="length of the stream")
    parser.add_argument("--drain", type=float, default=300.0, help="at most this long for the backlog afterwards")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--cache-ram-mib", type=int, default=HsiSettings.model_fields["CACHE_RAM_MIB"].default, help="llama-server's"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hsi-load-"))
    home, inbox, db = work / "home", work / "inbox", work / "hsi.duckdb"
    home.mkdir()
    inbox.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    settings_env = {
        "CTX_SIZE": str(SLOT_CONTEXT * args.parallel),
        "PARALLEL": str(args.parallel),
        "THREADS": "2",
        "NEMOTRON_MAX_OUTPUT_TOKENS": str(args.max_tokens),
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    }
    server = EmbeddedServerProcess(
        {
            "PARALLEL": args.parallel,
            "CTX_SIZE": SLOT_CONTEXT * args.parallel,
            "THREADS": 2,
            "CACHE_RAM_MIB": args.cache_ram_mib,
        },
        log_path=str(work / "llama.log"),
        env_file=os.devnull,
    ).start()
    env = {
        **os.environ,
        **settings_env,
        "HSI_ENV_FILE": os.devnull,
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": str(db),
        "HSI_INBOX_DIR": str(inbox),
        "LLAMA_SERVER_URL": server.url,
        "PYTHONUNBUFFERED": "1",
    }
    rules = BatchRules()
    cams = cameras(args.cameras)
    start = datetime.fromtimestamp(int(time.time()) + 2, tz=UTC)
    records = stream_records(args.seed, cams, args.factor, start, args.seconds)
    chunks = per_second(records, start, args.seconds)
    faults = [bad.line for bad in bad_lines(args.seed, args.seconds // BAD_EVERY + 1)]
    refs = [DetectionRef(r["detection_id"], r["camera_id"], _utc(r), r["label"], r["confidence"]) for r in records]
    windows = assign_batches(refs, rules)
    load_start = load_average()
    events_per_hour = NORMAL_EVENTS_PER_CAMERA_HOUR * args.factor * args.cameras
    print(
        f"work {work}; server {server.url} ({args.parallel} slots); {args.cameras} cameras at {args.factor:g} x "
        f"{NORMAL_EVENTS_PER_CAMERA_HOUR:g} events/camera/h = {events_per_hour:g} events/h: "
        f"{len(records)} detections in {args.seconds}s ({len(records) / args.seconds:.1f}/s), "
        f"{len(windows)} windows ({sum(w.close_reason == 'fast_path' for w in windows)} fast path); load {load_start}",
        flush=True,
    )
    pipeline = Pipeline(env, work)
    sampler = Sampler(server.pid or 0, pipeline, db, rules)
    stream = Stream(chunks, faults, inbox, db, start.timestamp())
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "load_at_start": load_start}
    t_begin = time.time()
    try:
        sampler.start()
        stream.start()
        pipeline.start()
        stream.join()
        stream_end = time.time()
        if stream.error:
            raise stream.error
        last_close = max(w.closes_at.timestamp() for w in windows)
        print(f"stream done at +{stream_end - t_begin:.0f}s; last window closes {last_close - stream_end:+.0f}s")
        deadline = stream_end + args.drain
        drained_at = None
        while time.time() < deadline:
            state = sampler.counts()
            if state and time.time() > last_close + 1 and state["backlog"] == 0 and state["stored"] >= len(records):
                drained_at = time.time()
                break
            time.sleep(5.0)
        state_at_stop = sampler.counts()
        pipeline.stop()
        pipeline.join(timeout=60)
    finally:
        sampler.stop_event.set()
        pipeline.stop()
        server.stop()

    os.environ["DAGSTER_HOME"] = str(home)  # the instance `hsi process` used
    import dagster as dg

    from tests.reliability.stream_ledger import successful_runs_per_partition

    with dg.DagsterInstance.get() as instance:
        runs = successful_runs_per_partition(instance)
        failed_runs = len(instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])))
    final = ledger(db, [r["detection_id"] for r in records], stream.bad_in, runs)
    with connect(db, read_only=True) as conn:
        latencies = [ms / 1000 for (ms,) in conn.execute("SELECT latency_ms FROM risk_assessments").fetchall() if ms]
        assessed_times = sorted(
            t for (t,) in conn.execute("SELECT epoch(assessed_at) FROM risk_assessments").fetchall()
        )
        pending_left = len(pending_closed_batches(conn, rules, datetime.now(UTC)))
    run_end = time.time()
    memory = memory_figures(sampler.rss, args.cache_ram_mib)
    lags = sorted(stream.lags)
    assessed_during_stream = sum(1 for t in assessed_times if t <= stream_end)
    # Sustained: assessments over the time from the first window closing to the stop (the pipeline had work
    # throughout: the backlog never emptied before the stop unless it drained).
    first_close = min(w.closes_at.timestamp() for w in windows)
    stopped = drained_at or (state_at_stop or {}).get("t") or run_end
    assess_rate = len(assessed_times) / max(stopped - first_close, 1e-9) * 60
    backlog_left = (state_at_stop or {}).get("backlog")
    criteria = {
        "ingest_keeps_up": bool(lags) and lags[-1] <= MAX_INGEST_LAG_S,
        "memory_bounded": memory["bounded"],
        "nothing_lost": not final.lost and final.quarantined_bad == stream.bad_in and not final.duplicate_detections,
        "no_duplicates": final.duplicates == 0,
        "backlog_drained": drained_at is not None,
    }
    figures = {
        "cameras": args.cameras,
        "normal_events_per_camera_hour": NORMAL_EVENTS_PER_CAMERA_HOUR,
        "factor": args.factor,
        "offered_detections_per_s": round(len(records) / args.seconds, 2),
        "offered_windows_per_min": round(len(windows) / args.seconds * 60, 1),
        "detections": len(records),
        "bad_lines": stream.bad_in,
        "windows": len(windows),
        "fast_path_windows": sum(w.close_reason == "fast_path" for w in windows),
        "ingest_rate_per_s": round(len(records) / max(stream.ingest_busy, 1e-9)),
        "sustained_ingest_per_s": round(final.stored / args.seconds, 2),
        "ingest_lag_s": {
            "median": round(statistics.median(lags), 3),
            "p90": round(lags[int(0.9 * (len(lags) - 1))], 3),
            "max": round(lags[-1], 3),
        },
        "assessments": final.assessments,
        "assessed_during_stream": assessed_during_stream,
        "sustained_assessments_per_min": round(assess_rate, 2),
        "llm_latency_median_s": round(statistics.median(latencies), 1) if latencies else None,
        "backlog_at_stop": backlog_left,
        "pending_windows_left": pending_left,
        "drain_s": round(drained_at - stream_end) if drained_at else None,
        "projected_drain_s": round(backlog_left / assess_rate * 60) if backlog_left and assess_rate else None,
        "ledger": final.row(),
        "statuses": final.statuses,
        "failed_runs": failed_runs,
        "hsi_process_invocations": len(pipeline.invocations),
        "memory": memory,
        "load": {
            "start": load_start,
            "median": statistics.median(sampler.loads) if sampler.loads else None,
            "max": max(sampler.loads, default=None),
        },  # fmt: skip
        "run_s": round(run_end - t_begin),
    }
    result.update(figures=figures, criteria=criteria, progress=sampler.progress)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(
        "LOAD "
        + " ".join(f"{name}={'PASS' if ok else 'FAIL'}" for name, ok in criteria.items())
        + f" | ingest {figures['sustained_ingest_per_s']} det/s (lag max {figures['ingest_lag_s']['max']}s),"
        f" assessments {figures['sustained_assessments_per_min']}/min, backlog at stop {backlog_left}"
        f" (projected drain {figures['projected_drain_s']}s), peak RSS {memory['total_peak_mib']} MiB"
    )
    return 0 if all(criteria.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
