"""The live path at interactive speed: a live simulated stream through the inbox sensor and the daemon, side by side
with `hsi process` on the same files, real parts only.

Run:  flock /tmp/hsi-bench.lock .venv/bin/python bench/live_bench.py --rate 0.5 --seconds 180 [--seed 7]
      [--parallel 2] [--max-tokens 384] [--orchestrator daemon|dev|managed] [--lanes daemon,cli] [--json OUT]

The lanes run one after the other on the same stream, each with the whole machine (two lanes at once on 2 cores
starve the LLM: requests then outlast the client's read timeout). Every process is in its own process group and
all are stopped at the end, also on Ctrl-C or SIGTERM.
- one embedded llama.cpp server (hsi_dagster.llm.embedded, SmolLM2) with PARALLEL slots, shared by the lanes in turn;
- the stream: the first lane gets `hsi simulate --live --inbox INBOX --rate R --seconds S` (one file per second with
  that second's detections); the next lane gets the same files again at the same pace with every timestamp shifted
  to the replay's clock (same detections, same windows);
- lane "daemon": `dagster code-server start` + `dagster-daemon run` pointed at it, as `dagster dev` starts them (or
  `dagster dev` itself, or a daemon that loads the module itself: --orchestrator) on a temporary DAGSTER_HOME with the
  repository's dagster.yaml and a temporary DuckDB file, watching its inbox: inbox_sensor loads the files in its
  ticks and requests a run per closed window, through the run queue and pools, against the embedded server;
- lane "cli": each file ingested by this script into the lane's DuckDB file as soon as it appears (the library call
  `hsi ingest` makes), and `hsi process` (a fresh command, its own DAGSTER_HOME) started whenever a window has
  closed (windows computed from the files with hsi_dagster.core.intake.batching), one at a time, as a cron job would.

Per batch: window closed (closes_at; the stream's timestamps are wall-clock time) -> row stored (assessed_at), LLM
time (latency_ms) and overhead = the difference minus LLM time (also shown less any wait for a free LLM slot, which
is LLM capacity rather than orchestration: the stated rate should leave none); per file: ingest lag = ingested_at -
the file's mtime. Exactly once: every window of the stream has exactly one risk_assessments row and one successful run
(and one risk_assessments materialization) in each lane's Dagster instance, every detection is in one batch.
Stages from Dagster's event log (daemon lane): window closed -> detections visible -> sensor tick -> run enqueued ->
RUN_STARTING (dequeued and launched) -> run process started -> RUN_START -> each step -> row stored. DuckDB lock
waits: a `sitecustomize` put on the lanes' PYTHONPATH times every `hsi_dagster.storage.db.open_connection` call
(package code unchanged). The lanes' databases are not read while the stream runs (a reader would make writers wait);
measurement queries here are read-only.

Evidence-only alerts (issue 24 item 4; --evidence-every S, default 30, 0 = off): during the daemon lane's stream,
every S seconds the bench drops one more file into the inbox holding a stranger beside a knife (two "knife"
detections: evidence alone is critical), as a detector would. The lane's ALERT_WEBHOOK_URL points at a receiver in
this script. Stage "inbox file written -> evidence alert posted": the file's mtime to the receiver's clock when the
POST arrives (same machine, same clock); also "-> alert stored" (evidence_alerts.created_at). Goal <= 2 s.
Figures that do not wait for the LLM (evidence alert posted, window closed -> run created) are also printed
("early") EARLY_GRACE_S after the stream's last window closed, so that a loaded machine's slow LLM, which may
outlast --settle-timeout, cannot lose them.

Micro figures (--micro, on by default, before the stream): import time of hsi_dagster.definitions, a process
spawned with multiprocessing 'spawn' that imports it (what dagster's code server does per run), and the readiness
check with its schema probe (LlamaClient.ensure_ready) from a fresh process. The load average is sampled throughout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from proc_stats import descendants, load_average  # bench/ is on sys.path when a bench runs

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin: hsi, dagster, dagster-daemon
SLOT_CONTEXT = 4096
STEPS = ("detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments")


# ----------------------------------------------------------------------------------------------------- utilities
ACTIVITY_START = "2026-12-03T15:00:00Z"  # the stream of the runs of record (docs/live-path.md)


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile (the largest value for fewer than 10 values)."""
    return sorted(values)[math.ceil(0.9 * len(values)) - 1]


def summary(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.2f}s, p90 {p90(values):.2f}s, max {max(values):.2f}s (n={len(values)})"


def _epoch(value: Any) -> float:
    """A DuckDB TIMESTAMPTZ or a Dagster datetime (naive = UTC) as epoch seconds."""
    if value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


class Processes:
    """Every process started here, each in its own session (process group), stopped group by group at the end."""

    def __init__(self) -> None:
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self._lock = threading.Lock()
        self.closing = False

    def start(self, name: str, argv: list[str], *, env: dict[str, str], cwd: Path, log) -> subprocess.Popen:
        with self._lock:
            if self.closing:
                raise RuntimeError(f"not starting {name}: shutting down")
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._procs.append((name, proc))
            return proc

    @staticmethod
    def stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
        """SIGTERM the process group (a daemon's code server and run processes, `hsi process` workers), then
        SIGKILL whatever is left of the group and of the process's descendants (in any group)."""
        family = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
        family |= descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # children that outlive their leader
        for pid in family:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    def stop_all_started(self) -> None:
        """Stop every process started so far (latest first); later starts are still allowed."""
        with self._lock:
            procs, self._procs = list(reversed(self._procs)), []
        for _, proc in procs:
            self.stop(proc)

    def stop_all(self) -> None:
        with self._lock:
            self.closing = True
        self.stop_all_started()


class LoadSampler(threading.Thread):
    """The 1-minute load average and the machine's CPU busy share, every 5 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="load-sampler")
        self.samples: list[tuple[float, float, float]] = []  # (epoch, loadavg, cpu busy share since last sample)
        self.stop_event = threading.Event()

    @staticmethod
    def _cpu() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    def run(self) -> None:
        busy0, total0 = self._cpu()
        while not self.stop_event.wait(5.0):
            busy, total = self._cpu()
            share = (busy - busy0) / max(1, total - total0)
            busy0, total0 = busy, total
            self.samples.append((time.time(), load_average(), share))

    def between(self, start: float, end: float) -> dict[str, float]:
        inside = [s for s in self.samples if start <= s[0] <= end] or self.samples
        if not inside:
            return {}
        loads, busy = [s[1] for s in inside], [s[2] for s in inside]
        return {
            "load_min": min(loads),
            "load_median": statistics.median(loads),
            "load_max": max(loads),
            "cpu_busy_median": statistics.median(busy),
        }


# DuckDB lock waits, measured without touching package code: a `sitecustomize` on the lanes' PYTHONPATH wraps
# hsi_dagster.storage.db.open_connection when that module is first imported (nothing is imported earlier, so
# process start-up is unchanged) and appends one line per call: pid, start, seconds in the call, read-only, caller.
SITECUSTOMIZE = """\
import importlib.abc, importlib.machinery, os, sys, time

_LOG = os.environ.get("HSI_BENCH_LOCK_LOG")


def _caller():
    frame = sys._getframe(2)
    for _ in range(8):
        name = frame.f_globals.get("__name__", "?")
        if name not in ("hsi_dagster.storage.db", "contextlib") and not name.startswith("_bench_"):
            return f"{name}.{frame.f_code.co_name}"
        frame = frame.f_back
        if frame is None:
            break
    return "?"


def _patch(module):
    inner = module.open_connection

    def open_connection(path, *args, **kwargs):
        start, t0 = time.time(), time.perf_counter()
        try:
            return inner(path, *args, **kwargs)
        finally:
            took = time.perf_counter() - t0
            mode = int(bool(kwargs.get("read_only")))
            line = f"{os.getpid()} {start:.4f} {took:.4f} {mode} {_caller()}\\n"
            with open(_LOG, "a") as log:
                log.write(line)

    module.open_connection = open_connection


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "hsi_dagster.storage.db":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if _LOG:
    sys.meta_path.insert(0, _Finder())
"""


def read_lock_log(path: Path) -> dict[str, Any]:
    """Calls to open_connection: how many, how long they took (a call that waits out another process's lock takes
    tens of milliseconds or more; an uncontended one a few), by caller."""
    if not path.exists():
        return {"calls": 0}
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5:
            rows.append((int(parts[0]), float(parts[1]), float(parts[2]), parts[3] == "1", parts[4]))
    waits = [r[2] for r in rows]
    slow = [r for r in rows if r[2] >= 0.05]
    by_caller: dict[str, list[float]] = {}
    for r in slow:
        by_caller.setdefault(r[4], []).append(r[2])
    return {
        "calls": len(rows),
        "median_s": statistics.median(waits) if waits else 0.0,
        "waits_over_50ms": len(slow),
        "total_over_50ms_s": sum(r[2] for r in slow),
        "max_s": max(waits) if waits else 0.0,
        "slow_by_caller": {
            k: {"n": len(v), "total_s": round(sum(v), 3), "max_s": max(v)} for k, v in by_caller.items()
        },
    }


# ------------------------------------------------------------------------------------------------------ the stream
@dataclass
class StreamFile:
    path: Path
    mtime: float
    records: list[dict]


def read_stream(inbox: Path) -> list[StreamFile]:
    files = []
    # inbox_sensor moves each file it has loaded to <inbox>/.processed/ (hsi_dagster/sensors/inbox_archive.py)
    for path in sorted([*inbox.glob("*.jsonl"), *inbox.glob(".processed/*.jsonl")], key=lambda p: p.name):
        if path.name.startswith("."):
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        files.append(StreamFile(path.resolve(), path.stat().st_mtime, records))
    return files


def refs_of(records: list[dict]):
    from hsi_dagster.core.intake.batching import DetectionRef

    return [
        DetectionRef(
            r["detection_id"],
            r["camera_id"],
            datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).astimezone(UTC),
            r["label"],
            float(r["confidence"]),
        )
        for r in records
    ]


def batch_rules():
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.settings import load_settings

    return BatchRules.from_settings(load_settings())


# ------------------------------------------------------------------------------------------- evidence-only alerts
class AlertReceiver:
    """The webhook every alert of the lanes is posted to: records (arrival time, JSON body)."""

    def __init__(self) -> None:
        self.received: list[tuple[float, dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def evidence_only(self) -> dict[str, float]:
        """alert_key -> when its POST arrived (the first, if it came twice)."""
        arrived: dict[str, float] = {}
        for at, body in self.received:
            if body.get("kind") == "evidence_only":
                arrived.setdefault(body["alert_id"].removeprefix("evidence:"), at)
        return arrived


class EvidenceInjector(threading.Thread):
    """Every `every` seconds, one inbox file with a stranger beside a knife (timestamps now), written the way the
    simulator writes (a dot-file renamed when complete)."""

    def __init__(self, inbox: Path, every: float) -> None:
        super().__init__(daemon=True)
        self.inbox, self.every = inbox, every
        self.stop_event = threading.Event()
        self.written: dict[str, float] = {}  # file name -> mtime

    def run(self) -> None:
        k = 0
        while not self.stop_event.wait(self.every):
            k += 1
            now = datetime.now(UTC)
            records = [
                {"detection_id": f"evidence-{k}-{label}-{n}", "camera_id": "garage", "label": label,
                 "ts": (now - timedelta(seconds=0.1 * (3 - n))).isoformat().replace("+00:00", "Z"),
                 "confidence": 0.85 if label == "person" else 0.8, "track_id": f"evidence-{k}-{label}",
                 "zone": "garage_door", "enrichment": {"reid": {"identity": None, "known": False, "score": 0.2}}}
                for label, n in (("person", 0), ("knife", 1), ("knife", 2))
            ]  # fmt: skip
            name = f"evidence-{k:03d}.jsonl"
            tmp = self.inbox / f".{name}"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
            tmp.rename(self.inbox / name)
            self.written[name] = (self.inbox / name).stat().st_mtime


EARLY_GRACE_S = 10.0  # after the last window closes: the write delay, a daemon loop (5 s) and the tick


def early_figures(
    expected: list, home: Path, injector: EvidenceInjector | None, receiver: AlertReceiver | None
) -> dict[str, Any]:
    """What needs no LLM: per injected file, its mtime -> its evidence-only alert's POST (by the alert's track id,
    from the receiver alone: the lane's database is not read while runs write); per window of the stream, its
    close -> the first batch_pipeline run created for it (the Dagster instance)."""
    figures: dict[str, Any] = {}
    if injector is not None and receiver is not None:
        posted: dict[str, float] = {}
        evidence_posts = [(at, b) for at, b in receiver.received if b.get("kind") == "evidence_only"]
        for at, body in evidence_posts:
            posted.setdefault(str(body.get("track_id")), at)
        latencies = []
        for name, mtime in sorted(injector.written.items()):
            k = int(name.split("-")[1].split(".")[0])
            if f"evidence-{k}-person" in posted:
                latencies.append(posted[f"evidence-{k}-person"] - mtime)
        figures["evidence"] = {
            "files": len(injector.written),
            "posted": len(latencies),
            "duplicate_posts": len(evidence_posts) - len(posted),
            "file_to_posted": latencies,
        }
    created: dict[str, float] = {}
    for run in dagster_runs(home):
        if run["job"] == "batch_pipeline" and run["partition"]:
            created[run["partition"]] = min(created.get(run["partition"], math.inf), run["created"])
    figures["close_to_run_created"] = [
        created[b.batch_id] - b.closes_at.timestamp() for b in expected if b.batch_id in created
    ]
    figures["windows"], figures["windows_with_a_run"] = len(expected), len(figures["close_to_run_created"])
    return figures


def print_early(name: str, early: dict[str, Any], load: float) -> None:
    e = early.get("evidence")
    if e:
        print(
            f"{name}: early: inbox file written -> evidence alert posted {summary(e['file_to_posted'])}; "
            f"{e['posted']} of {e['files']} files, {e['duplicate_posts']} duplicate posts; load {load:.2f}",
            flush=True,
        )
    print(
        f"{name}: early: window closed -> run created {summary(early['close_to_run_created'])}; "
        f"{early['windows_with_a_run']} of {early['windows']} windows",
        flush=True,
    )


def evidence_figures(lane: Lane, injector: EvidenceInjector | None, receiver: AlertReceiver) -> dict[str, Any]:
    """Per injected file: its mtime -> its alert stored (evidence_alerts.created_at) and -> posted (received)."""
    if injector is None or not injector.written:
        return {}
    from hsi_dagster.storage.db import connect

    with connect(lane.db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT alert_key, detection_id, epoch(created_at), webhook_status FROM evidence_alerts"
        ).fetchall()
    arrived = receiver.evidence_only()
    stored, posted, missing = [], [], []
    for name, mtime in sorted(injector.written.items()):
        k = int(name.split("-")[1].split(".")[0])
        row = next((r for r in rows if r[1].startswith(f"evidence-{k}-")), None)
        if row is None:
            missing.append(name)
            continue
        stored.append(row[2] - mtime)
        if row[0] in arrived:
            posted.append(arrived[row[0]] - mtime)
    return {
        "files": len(injector.written),
        "alerts": len(rows),
        "posts": len(arrived),
        "duplicate_posts": sum(1 for _, b in receiver.received if b.get("kind") == "evidence_only") - len(arrived),
        "missing": missing,
        "file_to_stored": stored,
        "file_to_posted": posted,
    }


# ---------------------------------------------------------------------------------------------------------- lanes
class Lane:
    """One lane's DuckDB file, Dagster home, lock-wait log and environment."""

    def __init__(self, name: str, work: Path, base_env: dict[str, str], inbox: Path) -> None:
        self.name = name
        self.work = work
        self.home = work / f"{name}_home"
        self.home.mkdir()
        shutil.copy(ROOT / "dagster.yaml", self.home / "dagster.yaml")
        self.db = work / f"{name}.duckdb"
        self.lock_log = work / f"{name}_locks.log"
        self.inbox = inbox
        inbox.mkdir(exist_ok=True)
        self.env = {
            **base_env,
            "DAGSTER_HOME": str(self.home),
            "HSI_DUCKDB_PATH": str(self.db),
            "HSI_INBOX_DIR": str(inbox),
            "HSI_BENCH_LOCK_LOG": str(self.lock_log),
        }

    def apply_pool_limits(self) -> None:
        """The pool limits `hsi` sets on its instance (llama_slots = PARALLEL, duckdb_writes = 1)."""
        code = (
            "from hsi_dagster.cli.instance import get_instance; from hsi_dagster.settings import load_settings; "
            "get_instance(load_settings())"
        )
        subprocess.run([sys.executable, "-c", code], env=self.env, cwd=self.work, check=True, timeout=120)

    def progress(self) -> dict[str, Any]:
        """Counts for the completion check (read-only, used only once the stream has ended)."""
        from hsi_dagster.storage.db import DatabaseNotFound, connect

        try:
            with connect(self.db, read_only=True, wait_seconds=10) as conn:
                detections, unassigned = _one(
                    conn, "SELECT count(*), count(*) FILTER (WHERE batch_id IS NULL) FROM detections"
                )
                batches, unassessed = _one(
                    conn,
                    "SELECT count(*), count(*) FILTER (WHERE batch_id NOT IN (SELECT batch_id FROM risk_assessments))"
                    " FROM detection_batches",
                )
        except (DatabaseNotFound, Exception) as exc:  # noqa: BLE001 - a missing table before the first ingest too
            return {"error": 1, "detections": 0, "unassigned": 0, "batches": 0, "unassessed": 0, "why": str(exc)[:80]}
        return {"detections": detections, "unassigned": unassigned, "batches": batches, "unassessed": unassessed}

    def rows(self) -> dict[str, Any]:
        """Everything measured in the lane's DuckDB file (read-only, after the lane has stopped)."""
        from hsi_dagster.storage.db import connect

        with connect(self.db, read_only=True) as conn:
            batches = conn.execute(
                "SELECT b.batch_id, b.camera_id, epoch(b.closes_at), b.close_reason, b.has_late, b.detection_count, "
                "epoch(b.recorded_at), (SELECT epoch(max(d.ingested_at)) FROM detections d "
                "WHERE d.batch_id = b.batch_id) FROM detection_batches b"
            ).fetchall()
            assessments = conn.execute(
                "SELECT batch_id, epoch(assessed_at), latency_ms, status FROM risk_assessments"
            ).fetchall()
            files = conn.execute("SELECT path, mtime_ns, epoch(ingested_at), loaded FROM ingested_files").fetchall()
            detections, unassigned, late = _one(
                conn,
                "SELECT count(*), count(*) FILTER (WHERE batch_id IS NULL), count(*) FILTER (WHERE is_late) "
                "FROM detections",
            )
            (quarantined,) = _one(conn, "SELECT count(*) FROM quarantine")
        return {
            "batches": {
                b[0]: {
                    "camera": b[1],
                    "closes_at": b[2],
                    "reason": b[3],
                    "has_late": b[4],
                    "detections": b[5],
                    "recorded_at": b[6],
                    "last_ingested_at": b[7],
                }
                for b in batches
            },
            "assessments": {
                a[0]: {"stored_at": a[1], "latency_s": (a[2] or 0.0) / 1000, "status": a[3]} for a in assessments
            },
            "files": {f[0]: {"mtime": f[1] / 1e9, "ingested_at": f[2], "loaded": f[3]} for f in files},
            "detections": detections,
            "unassigned": unassigned,
            "late": late,
            "quarantined": quarantined,
        }


def _one(conn, sql: str) -> tuple:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def wait_until_done(lanes: list[Lane], expected_detections: int, timeout: float, alive) -> dict[str, dict]:
    """Poll each lane every 5 s until every detection is batched and every batch assessed (or timeout)."""
    deadline = time.monotonic() + timeout
    shown = time.monotonic()
    last: dict[str, dict] = {}
    while True:
        pending = []
        for lane in lanes:
            state = lane.progress()
            last[lane.name] = state
            done = (
                not state.get("error")
                and state["detections"] >= expected_detections
                and state["unassigned"] == 0
                and state["unassessed"] == 0
            )
            if not done:
                pending.append(lane.name)
        if not pending:
            return last
        problem = alive()
        if problem:
            raise RuntimeError(problem)
        if time.monotonic() > deadline:
            raise TimeoutError(f"lanes {pending} not done after {timeout:.0f}s: {last}")
        if time.monotonic() - shown > 30:
            shown = time.monotonic()
            print(f"  waiting for {pending}: {last}; load {load_average():.2f}", flush=True)
        time.sleep(5.0)


class CliLane(threading.Thread):
    """Ingest each new stream file into the cli lane's database, and run `hsi process` whenever a window has closed
    that no earlier `hsi process` saw (one at a time, as a cron job or a watcher script would)."""

    def __init__(self, lane: Lane, inbox: Path, procs: Processes, log, poll_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="cli-lane")
        self.lane, self.inbox, self.procs, self.log, self.poll_s = lane, inbox, procs, log, poll_s
        self.stop_event = threading.Event()
        self.seen: set[Path] = set()
        self.refs: list = []
        self.refs_lock = threading.Lock()
        self.handed: set[str] = set()
        self.invocations: list[dict] = []
        self.ingest_calls: list[dict] = []
        self.error: BaseException | None = None
        self.rules = batch_rules()

    def _ingest_new(self) -> None:
        from hsi_dagster.storage.ingest import ingest_files

        for path in sorted(self.inbox.glob("*.jsonl")):
            if path.name.startswith(".") or path in self.seen:
                continue
            started = time.time()
            ingest_files(str(self.lane.db), [path], skip_already_ingested=True)
            self.ingest_calls.append({"file": str(path.resolve()), "start": started, "end": time.time()})
            self.seen.add(path)
            new = refs_of([json.loads(line) for line in path.read_text().splitlines() if line.strip()])
            with self.refs_lock:
                self.refs.extend(new)

    def _closed_not_handed(self) -> list:
        from hsi_dagster.core.intake.batching import assign_batches, closed_batches

        now = datetime.now(UTC)
        with self.refs_lock:
            refs = list(self.refs)
        return [b for b in closed_batches(assign_batches(refs, self.rules), now) if b.batch_id not in self.handed]

    def _hsi_process(self, batch_ids: list[str]) -> None:
        started = time.time()
        proc = self.procs.start(
            "hsi process", [str(BIN / "hsi"), "process"], env=self.lane.env, cwd=self.lane.work, log=self.log
        )
        try:
            code = proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            Processes.stop(proc)
            code = -1
        self.invocations.append({"start": started, "end": time.time(), "batches": batch_ids, "exit": code})
        self.handed.update(batch_ids)
        recent = [i["exit"] for i in self.invocations[-3:]]
        if len(recent) == 3 and all(recent):
            raise RuntimeError(f"`hsi process` failed 3 times in a row (exit {recent}); see processes.log")

    def run(self) -> None:
        # One thread ingests, this one runs `hsi process`: ingest never waits behind an assessment.
        ingester = threading.Thread(target=self._ingest_loop, daemon=True, name="cli-ingest")
        ingester.start()
        try:
            while not self.stop_event.is_set():
                due = self._closed_not_handed()
                if due:
                    self._hsi_process([b.batch_id for b in due])
                else:
                    self.stop_event.wait(self.poll_s)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def _ingest_loop(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._ingest_new()
                self.stop_event.wait(self.poll_s)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


# ---------------------------------------------------------------------------------------------- Dagster's records
def dagster_runs(home: Path) -> list[dict]:
    """Every run of the lane's instance with the timestamps of its events (epoch seconds)."""
    import dagster as dg
    from dagster._core.events import DagsterEventType as T

    wanted = {
        T.RUN_ENQUEUED: "enqueued",
        T.RUN_STARTING: "starting",
        T.RUN_START: "run_start",
        T.RUN_SUCCESS: "run_end",
        T.RUN_FAILURE: "run_end",
    }
    runs = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for record in instance.get_run_records():
            run = record.dagster_run
            detections_op: dict[str, Any] = ((run.run_config or {}).get("ops") or {}).get("detections") or {}  # type: ignore[attr-defined]
            info: dict[str, Any] = {
                "run_id": run.run_id,
                "job": run.job_name,
                "status": run.status.value,
                "partition": run.tags.get("dagster/partition"),
                "tick": run.tags.get("dagster/tick"),
                "created": _epoch(record.create_timestamp),
                "paths": (detections_op.get("config") or {}).get("paths"),
                "steps": {},
                "materialized": [],
            }
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                if event is None:
                    continue
                kind = event.event_type
                if kind in wanted:
                    info.setdefault(wanted[kind], entry.timestamp)
                elif kind == T.ENGINE_EVENT and (event.message or "").startswith("Started process for run"):
                    info.setdefault("process_started", entry.timestamp)
                elif kind == T.STEP_START:
                    info["steps"].setdefault(event.step_key, {})["start"] = entry.timestamp
                elif kind in (T.STEP_SUCCESS, T.STEP_FAILURE):
                    info["steps"].setdefault(event.step_key, {})["end"] = entry.timestamp
                elif kind == T.ASSET_MATERIALIZATION and event.asset_key is not None:
                    info["materialized"].append(event.asset_key.to_user_string())
            runs.append(info)
    return runs


def failed_runs(home: Path) -> int:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        return instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))


def dagster_ticks(home: Path) -> list[dict]:
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorType

    ticks = []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=100000):
                ticks.append(
                    {
                        "sensor": state.instigator_name,
                        "id": tick.tick_id,
                        "start": tick.timestamp,
                        "end": tick.end_timestamp,
                        "status": tick.status.value,
                        "run_ids": list(tick.run_ids),
                    }
                )
    return ticks


def wait_for_runs_to_finish(home: Path, timeout: float) -> None:
    import dagster as dg

    unfinished = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    deadline = time.monotonic() + timeout
    with dg.DagsterInstance.from_config(str(home)) as instance:
        while instance.get_runs_count(dg.RunsFilter(statuses=unfinished)) and time.monotonic() < deadline:
            time.sleep(0.5)


def risk_materializations(home: Path) -> dict[str, int]:
    import dagster as dg

    counts: dict[str, int] = {}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        cursor = None
        while True:
            result = instance.fetch_materializations(
                dg.AssetKey("risk_assessments"), limit=1000, cursor=cursor, ascending=True
            )
            for record in result.records:
                counts[record.partition_key or ""] = counts.get(record.partition_key or "", 0) + 1
            if not result.has_more:
                return counts
            cursor = result.cursor


# ------------------------------------------------------------------------------------------------------ micro figures
def micro(env: dict[str, str], work: Path, url: str) -> dict[str, Any]:
    """Import, spawn and readiness-probe costs, each in a fresh process (what every run process pays today)."""
    out: dict[str, Any] = {"load_before": load_average()}
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import hsi_dagster.definitions"], env=env, cwd=work, check=True)
        walls.append(time.perf_counter() - t0)
    out["import_definitions_wall_s"] = walls
    trace = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import hsi_dagster.definitions"],
        env=env,
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    ).stderr
    cumulative = {}
    for line in trace.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[1].isdigit():
            cumulative[parts[2]] = int(parts[1]) / 1e6
    out["importtime_s"] = {
        name: cumulative.get(name)
        for name in ("hsi_dagster.definitions", "dagster", "hsi_dagster.storage.ingest", "numpy", "httpx", "duckdb")
    }
    spawn = textwrap.dedent(
        """
        import importlib, multiprocessing, time
        if __name__ == "__main__":
            ctx = multiprocessing.get_context("spawn")
            t0 = time.perf_counter()
            p = ctx.Process(target=importlib.import_module, args=("hsi_dagster.definitions",))
            p.start(); p.join()
            print(time.perf_counter() - t0)
        """
    )
    script = work / "_bench_spawn.py"
    script.write_text(spawn)
    out["spawn_import_definitions_s"] = [
        float(
            subprocess.run(
                [sys.executable, str(script)], env=env, cwd=work, check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(3)
    ]
    probe = textwrap.dedent(
        f"""
        import json, time
        from hsi_dagster.llm.client import LlamaClient
        t0 = time.perf_counter()
        with LlamaClient({url!r}) as client:
            client.wait_until_ready(); t1 = time.perf_counter()
            client.server_info(); t2 = time.perf_counter()
            client.verify_schema_enforcement(); t3 = time.perf_counter()
        print(json.dumps({{"health_s": t1 - t0, "props_slots_s": t2 - t1, "schema_probe_s": t3 - t2}}))
        """
    )
    probes = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=work, capture_output=True, text=True)
        probes.append(json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr.strip()[-300:]})
    out["ensure_ready_fresh_process"] = probes
    out["load_after"] = load_average()
    return out


# ------------------------------------------------------------------------------------------------------- analysis
def batch_key(batch) -> tuple[str, str]:
    """The same window in every lane: camera and first detection id (a replay shifts only the timestamps)."""
    return batch.camera_id, batch.detection_ids[0]


def batch_table(expected: dict[str, list], lanes: dict[str, dict]) -> list[dict]:
    """One row per window of the stream, with each lane's batch id, close time, row and figures."""
    first = next(iter(expected))
    by_key = {name: {batch_key(b): b for b in batches} for name, batches in expected.items()}
    rows = []
    for batch in expected[first]:
        key = batch_key(batch)
        row: dict[str, Any] = {
            "batch_id": batch.batch_id,
            "camera": batch.camera_id,
            "reason": batch.close_reason,
            "detections": len(batch.detection_ids),
        }
        for name, data in lanes.items():
            mine = by_key[name].get(key)
            stored = data["assessments"].get(mine.batch_id) if mine else None
            if mine is None or stored is None:
                row[name] = None
                continue
            recorded = data["batches"].get(mine.batch_id) or {}
            closes = mine.closes_at.timestamp()
            total = stored["stored_at"] - closes
            row[name] = {
                "batch_id": mine.batch_id,
                "closes_at": closes,
                "close_to_stored_s": total,
                "llm_s": stored["latency_s"],
                "overhead_s": total - stored["latency_s"],
                "visible_at": max(closes, recorded.get("last_ingested_at") or closes),
                "stored_at": stored["stored_at"],
                "status": stored["status"],
            }
        rows.append(row)
    return rows


def ingest_lags(files: list[StreamFile], data: dict) -> list[float]:
    lags = []
    for f in files:
        got = data["files"].get(str(f.path))
        lags.append(got["ingested_at"] - f.mtime if got else math.nan)
    return lags


def llm_slot_waits(table: list[dict], runs: list[dict], lane: str, slots: int) -> dict[str, float]:
    """Per batch: of the time between its run being ready (queued for the daemon, window visible for the cli lane)
    and starting, the part during which every llama_slots slot was held by other batches' runs (pools have run
    granularity: a run holds its slot from launch to end; `hsi process` runs PARALLEL at a time). That part is
    capacity (LLM time and the other runs' overhead), not this batch's orchestration."""
    ok = {r["partition"]: r for r in runs if r["job"] == "batch_pipeline" and r["status"] == "SUCCESS"}
    held: dict[str, tuple[float, float]] = {
        key: (r.get("starting") or r["run_start"], r["run_end"])
        for key, r in ok.items()
        if (r.get("starting") or r.get("run_start")) and r.get("run_end")
    }
    waits = {}
    for g in (row[lane] for row in table if row.get(lane)):
        run = ok.get(g["batch_id"])
        if run is None or g["batch_id"] not in held:
            continue
        ready, began = run.get("enqueued") or g["visible_at"], held[g["batch_id"]][0]
        others = [v for k, v in held.items() if k != g["batch_id"]]
        cuts = sorted({ready, began, *(t for span in others for t in span if ready < t < began)})
        waits[g["batch_id"]] = sum(
            b - a
            for a, b in zip(cuts, cuts[1:], strict=False)
            if sum(1 for start, end in others if start <= (a + b) / 2 < end) >= slots
        )
    return waits


def daemon_stages(table: list[dict], runs: list[dict], ticks: list[dict], lane: str) -> dict[str, list[float]]:
    """Per batch run of the lane: the time spent in each stage, from closes_at to the row."""
    # A tick's runs are requested when it ends (a tick may hold on for a window about to close: SENSOR_HOLD_SECONDS).
    tick_end = {t["id"]: t["end"] or t["start"] for t in ticks}
    tick_of_run = {run_id: t["end"] or t["start"] for t in ticks for run_id in t["run_ids"]}
    by_partition: dict[str, list[dict]] = {}
    for run in runs:
        if run["job"] == "batch_pipeline" and run["partition"]:
            by_partition.setdefault(run["partition"], []).append(run)
    stages: dict[str, list[float]] = {}

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None and not math.isnan(a) and not math.isnan(b):
            stages.setdefault(name, []).append(b - a)

    for row in table:
        got = row.get(lane)
        candidates = [r for r in by_partition.get(got["batch_id"], []) if r["status"] == "SUCCESS"] if got else []
        if not got or not candidates:
            continue
        run = candidates[0]
        tick = tick_of_run.get(run["run_id"]) or (tick_end.get(int(run["tick"])) if run.get("tick") else None)
        add("window closed -> end of the tick that requested the run", got["closes_at"], tick)
        add("window closed -> detections visible (ingest)", got["closes_at"], got["visible_at"])
        add("visible -> end of that tick", got["visible_at"], tick)
        add("window closed -> run created (plan + execution plan)", got["closes_at"], run["created"])
        add("run created -> enqueued (planned events, submit)", run["created"], run.get("enqueued"))
        add("tick end -> run enqueued", tick, run.get("enqueued") or run["created"])
        add("enqueued -> RUN_STARTING (queue, pools)", run.get("enqueued") or run["created"], run.get("starting"))
        add("RUN_STARTING -> run process started (spawn, imports)", run.get("starting"), run.get("process_started"))
        add("process started -> RUN_START", run.get("process_started"), run.get("run_start"))
        first = min((s["start"] for s in run["steps"].values() if "start" in s), default=None)
        add("RUN_START -> first STEP_START", run.get("run_start"), first)
        previous_end = None
        for step in STEPS:
            s = run["steps"].get(step, {})
            if previous_end is not None:
                add("between steps", previous_end, s.get("start"))
            if step == "risk_assessments":
                add("risk_assessments start -> row stored, minus LLM", s.get("start"), got["stored_at"] - got["llm_s"])
                add("LLM (latency_ms)", 0.0, got["llm_s"])
            else:
                add(f"step {step}", s.get("start"), s.get("end"))
            previous_end = s.get("end")
        add("row stored -> RUN_SUCCESS", got["stored_at"], run.get("run_end"))
    return stages


def ingest_stages(files: list[StreamFile], data: dict, runs: list[dict], ticks: list[dict]) -> dict[str, list[float]]:
    tick_of_run = {run_id: t["start"] for t in ticks for run_id in t["run_ids"]}
    by_file: dict[str, dict] = {}
    for run in runs:
        if run["job"] == "ingest_detections" and run["paths"] and run["status"] == "SUCCESS":
            for p in run["paths"]:
                by_file.setdefault(p, run)
    stages: dict[str, list[float]] = {}

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            stages.setdefault(name, []).append(b - a)

    for f in files:
        ingest_run = by_file.get(str(f.path))
        got = data["files"].get(str(f.path))
        if not ingest_run:
            continue
        add("file written -> sensor tick", f.mtime, tick_of_run.get(ingest_run["run_id"]))
        add("sensor tick -> run enqueued", tick_of_run.get(ingest_run["run_id"]), ingest_run.get("enqueued"))
        add(
            "enqueued -> RUN_STARTING (queue, duckdb_writes pool)",
            ingest_run.get("enqueued"),
            ingest_run.get("starting"),
        )
        add("RUN_STARTING -> run process started", ingest_run.get("starting"), ingest_run.get("process_started"))
        add("process started -> RUN_START", ingest_run.get("process_started"), ingest_run.get("run_start"))
        add(
            "RUN_START -> STEP_START",
            ingest_run.get("run_start"),
            ingest_run["steps"].get("detections", {}).get("start"),
        )
        add(
            "STEP_START -> rows loaded (ingested_at)",
            ingest_run["steps"].get("detections", {}).get("start"),
            got["ingested_at"] if got else None,
        )
        add("run wall time (RUN_STARTING -> end)", ingest_run.get("starting"), ingest_run.get("run_end"))
    return stages


def cli_stages(table: list[dict], runs: list[dict], invocations: list[dict]) -> dict[str, list[float]]:
    by_partition = {r["partition"]: r for r in runs if r["job"] == "batch_pipeline" and r["status"] == "SUCCESS"}
    stages: dict[str, list[float]] = {}

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            stages.setdefault(name, []).append(b - a)

    for row in table:
        got = row.get("cli")
        run = by_partition.get(got["batch_id"]) if got else None
        if not got or not run:
            continue
        invocation = next((i for i in invocations if got["batch_id"] in i["batches"]), None)
        start = invocation["start"] if invocation else None
        add("window closed -> detections visible (ingest)", got["closes_at"], got["visible_at"])
        add("visible -> `hsi process` started", got["visible_at"], start)
        add("`hsi process` started -> RUN_START", start, run.get("run_start"))
        first = min((s["start"] for s in run["steps"].values() if "start" in s), default=None)
        add("RUN_START -> first STEP_START", run.get("run_start"), first)
        risk = run["steps"].get("risk_assessments", {})
        add("first STEP_START -> risk_assessments start", first, risk.get("start"))
        add("risk_assessments start -> row stored, minus LLM", risk.get("start"), got["stored_at"] - got["llm_s"])
    return stages


def exactly_once(expected: list, data: dict, runs: list[dict], materializations: dict[str, int]) -> dict[str, Any]:
    expected_ids = {b.batch_id for b in expected}
    recorded, assessed = set(data["batches"]), set(data["assessments"])
    successes: dict[str, int] = {}
    failures: dict[str, int] = {}
    for run in runs:
        if run["job"] == "batch_pipeline" and run["partition"]:
            bucket = successes if run["status"] == "SUCCESS" else failures
            bucket[run["partition"]] = bucket.get(run["partition"], 0) + 1
    statuses: dict[str, int] = {}
    for a in data["assessments"].values():
        statuses[a["status"]] = statuses.get(a["status"], 0) + 1
    return {
        "missing_batches": sorted(expected_ids - recorded),
        "extra_batches": sorted(recorded - expected_ids),
        "windows_with_other_detections": sorted(
            b.batch_id
            for b in expected
            if b.batch_id in data["batches"] and data["batches"][b.batch_id]["detections"] != len(b.detection_ids)
        ),
        "unassessed": sorted(expected_ids - assessed),
        "batches_with_late_detections": sorted(b for b, v in data["batches"].items() if v["has_late"]),
        "detections": data["detections"],
        "unassigned_detections": data["unassigned"],
        "quarantined": data["quarantined"],
        "runs_not_exactly_one_success": {b: successes.get(b, 0) for b in expected_ids if successes.get(b, 0) != 1},
        "failed_runs": sum(failures.values()),
        "materializations_not_exactly_one": {
            b: materializations.get(b, 0) for b in expected_ids if materializations.get(b, 0) != 1
        },
        "statuses": statuses,
    }


def sensor_figures(ticks: list[dict]) -> dict[str, dict]:
    out = {}
    for name in sorted({t["sensor"] for t in ticks}):
        mine = sorted((t for t in ticks if t["sensor"] == name), key=lambda t: t["start"])
        durations = [t["end"] - t["start"] for t in mine if t["end"]]
        gaps = [b["start"] - a["start"] for a, b in zip(mine, mine[1:], strict=False)]
        out[name] = {
            "ticks": len(mine),
            "duration_median_s": statistics.median(durations) if durations else None,
            "duration_max_s": max(durations) if durations else None,
            "interval_median_s": statistics.median(gaps) if gaps else None,
            "runs_requested": sum(len(t["run_ids"]) for t in mine),
        }
    return out


# ------------------------------------------------------------------------------------------------------------ main
def replay(files: list[StreamFile], inbox: Path) -> None:
    """Write the first lane's stream again, file by file at the same pace, every timestamp shifted so the windows
    close in real time again (same detection ids, cameras, labels and gaps: the same windows)."""
    from hsi_dagster.synthetic.jsonl import write_jsonl
    from hsi_dagster.synthetic.live import shift_ts

    def index(f: StreamFile) -> int:  # live-<seed>-<stamp>-<k>.jsonl is written at the stream's t0 + k + 1
        return int(f.path.name.rsplit("-", 1)[1].split(".")[0])

    orig_t0 = statistics.median(f.mtime - (index(f) + 1) for f in files)
    new_t0 = time.time() + 1.0
    shift = timedelta(seconds=round(new_t0 - orig_t0, 3))

    for f in files:
        wait = new_t0 + index(f) + 1 - time.time()
        if wait > 0:
            time.sleep(wait)
        write_jsonl(inbox / f.path.name, [shift_ts(r, shift) for r in f.records])


@dataclass
class LaneResult:
    files: list[StreamFile]
    expected: list
    data: dict
    runs: list[dict]
    ticks: list[dict]
    invocations: list[dict]
    load: dict[str, float]
    stream_start: float
    stream_end: float
    evidence: dict[str, Any] = field(default_factory=dict)
    early: dict[str, Any] = field(default_factory=dict)


def run_lane(
    name: str,
    lane: Lane,
    args: argparse.Namespace,
    work: Path,
    procs: Processes,
    log,
    sampler: LoadSampler,
    source: list[StreamFile] | None,
    receiver: AlertReceiver | None = None,
) -> LaneResult:
    """One lane from start to finish: its orchestration up, the stream (live from `hsi simulate`, or a replay of
    `source`), every window assessed, its orchestration down; then its records."""
    lane.apply_pool_limits()
    daemon = cli_thread = None
    if name == "daemon":
        daemon = start_orchestrator(args.orchestrator, lane, work, procs, log)
        wait_for_sensors(work / "processes.log", daemon, ("batch_window_sensor", "inbox_sensor"))
    else:
        cli_thread = CliLane(lane, lane.inbox, procs, log)
        cli_thread.start()
    load = load_average()
    stream_start = time.time()
    print(f"{name}: stream ({'replay' if source else 'hsi simulate --live'}); load {load:.2f}", flush=True)
    injector = None
    if name == "daemon" and args.evidence_every > 0:
        injector = EvidenceInjector(lane.inbox, args.evidence_every)
        injector.start()
    if source is None:
        argv = [str(BIN / "hsi"), "simulate", "--live", "--inbox", str(lane.inbox), "--rate", str(args.rate),
                "--seconds", str(args.seconds), "--seed", str(args.seed),
                "--activity-start", args.activity_start]  # fmt: skip
        simulator = procs.start("hsi simulate", argv, env=lane.env, cwd=work, log=log)
        simulator.wait(timeout=args.seconds + 120)
        if simulator.returncode != 0:
            raise RuntimeError(f"hsi simulate exited with {simulator.returncode} (see {work / 'processes.log'})")
    else:
        replay(source, lane.inbox)
    if injector is not None:
        injector.stop_event.set()
        injector.join()
    stream_end = time.time()
    files = read_stream(lane.inbox)
    refs = refs_of([r for f in files for r in f.records])
    from hsi_dagster.core.intake.batching import assign_batches

    expected = assign_batches(refs, batch_rules())
    last_close = max(b.closes_at.timestamp() for b in expected)
    print(
        f"{name}: stream done: {len(files)} files, {len(refs)} detections, {len(expected)} windows "
        f"(last closes {last_close - stream_end:+.0f}s from now)",
        flush=True,
    )
    time.sleep(max(0.0, last_close - time.time()) + 1.0)
    early: dict[str, Any] = {}
    if daemon is not None:
        time.sleep(EARLY_GRACE_S)
        early = early_figures(expected, lane.home, injector, receiver)
        print_early(name, early, load_average())

    def alive() -> str | None:
        if daemon is not None and daemon.poll() is not None:
            return f"{args.orchestrator} exited with {daemon.returncode} (see {work / 'processes.log'})"
        if daemon is not None and failed_runs(lane.home) >= 3:
            return f"3 or more failed runs in the daemon lane (see {work / 'processes.log'})"
        if cli_thread is not None and cli_thread.error is not None:
            return f"cli lane failed: {cli_thread.error!r}"
        return None

    wait_until_done([lane], len(refs), args.settle_timeout, alive)
    done_at = time.time()
    print(f"{name}: done {done_at - last_close:.0f}s after the last window closed", flush=True)
    if daemon is not None:
        wait_for_runs_to_finish(lane.home, timeout=60.0)  # a run still runs its checks after storing its row
        procs.stop(daemon)
    if cli_thread is not None:
        cli_thread.stop_event.set()
        cli_thread.join(timeout=60)
    procs.stop_all_started()
    evidence = evidence_figures(lane, injector, receiver) if receiver is not None else {}
    return LaneResult(
        files=files,
        expected=expected,
        data=lane.rows(),
        runs=dagster_runs(lane.home),
        ticks=dagster_ticks(lane.home) if name == "daemon" else [],
        invocations=cli_thread.invocations if cli_thread else [],
        load={"at_stream_start": load, **sampler.between(stream_start, done_at)},
        stream_start=stream_start,
        stream_end=stream_end,
        evidence=evidence,
        early=early,
    )


def lane_figures(name: str, lane: Lane, res: LaneResult, table: list[dict], parallel: int) -> dict[str, Any]:
    slot_waits = llm_slot_waits(table, res.runs, name, parallel)
    for row in table:
        if row.get(name):
            row[name]["llm_slot_wait_s"] = slot_waits.get(row[name]["batch_id"], 0.0)
    mine = [r[name] for r in table if r.get(name)]
    figures: dict[str, Any] = {
        "load": res.load,
        "stream": {
            "files": len(res.files),
            "detections": sum(len(f.records) for f in res.files),
            "windows": len(res.expected),
            "fast_path_windows": sum(b.is_fast_path for b in res.expected),
            "seconds": res.stream_end - res.stream_start,
        },
        "overhead": [g["overhead_s"] for g in mine],
        "overhead_less_llm_slot_wait": [g["overhead_s"] - g["llm_slot_wait_s"] for g in mine],
        "close_to_stored": [g["close_to_stored_s"] for g in mine],
        "llm": [g["llm_s"] for g in mine],
        "ingest_lag": ingest_lags(res.files, res.data),
        "exactly_once": exactly_once(res.expected, res.data, res.runs, risk_materializations(lane.home)),
        "lock_waits": read_lock_log(lane.lock_log),
    }
    if res.evidence:
        figures["evidence_alerts"] = res.evidence
    if res.early:
        figures["early"] = res.early
    if name == "daemon":
        figures["stages"] = daemon_stages(table, res.runs, res.ticks, name)
        figures["ingest_stages"] = ingest_stages(res.files, res.data, res.runs, res.ticks)
        figures["sensors"] = sensor_figures(res.ticks)
        figures["runs"] = {
            job: sum(1 for r in res.runs if r["job"] == job) for job in sorted({r["job"] for r in res.runs})
        }
    else:
        figures["stages"] = cli_stages(table, res.runs, res.invocations)
        figures["hsi_process_invocations"] = res.invocations
        figures["runs"] = {"batch_pipeline": sum(1 for r in res.runs if r["job"] == "batch_pipeline")}
    return figures


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=0.5, help="detections per second of the live stream")
    parser.add_argument("--seconds", type=float, default=180.0, help="length of the live stream")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--activity-start",
        default=ACTIVITY_START,
        help="the simulated activity's clock (lighting by time of day), so every run plays the same stream "
        f"(default {ACTIVITY_START}: with --seconds 120, 54 files, 93 detections, 7 windows)",
    )
    parser.add_argument("--parallel", type=int, default=2, help="PARALLEL: server slots, llama_slots pool")
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument(
        "--orchestrator",
        choices=ORCHESTRATORS,
        default="daemon",
        help="daemon: `dagster code-server start` + `dagster-daemon run` pointed at it (as `dagster dev` starts "
        "them, without the webserver); dev: `dagster dev`; managed: `dagster-daemon run` loading the module itself "
        "(it restarts its code server every 60 s)",
    )
    parser.add_argument("--lanes", default="daemon,cli", help="daemon, cli or both, in the order they run")
    parser.add_argument(
        "--evidence-every",
        type=float,
        default=30.0,
        help="seconds between injected evidence files (a knife beside a stranger) in the daemon lane; 0 = none",
    )
    parser.add_argument("--settle-timeout", type=float, default=900.0, help="after the last window closes")
    parser.add_argument("--no-micro", action="store_true", help="skip the import/spawn/probe figures")
    parser.add_argument("--json", type=Path, help="write every figure and the per-batch table here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases, homes)")
    args = parser.parse_args()
    lanes_wanted = list(dict.fromkeys(x.strip() for x in args.lanes.split(",") if x.strip()))
    if not lanes_wanted or set(lanes_wanted) - {"daemon", "cli"}:
        parser.error("--lanes takes daemon, cli, daemon,cli or cli,daemon")

    work = Path(tempfile.mkdtemp(prefix="hsi-live-bench-"))
    trace = work / "trace"
    trace.mkdir()
    (trace / "sitecustomize.py").write_text(SITECUSTOMIZE)
    base_env = {
        **os.environ,
        "HSI_ENV_FILE": os.devnull,  # never the repository's .env
        "CTX_SIZE": str(SLOT_CONTEXT * args.parallel),
        "PARALLEL": str(args.parallel),
        "THREADS": "2",
        "NEMOTRON_MAX_OUTPUT_TOKENS": str(args.max_tokens),
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(trace), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    # Byte-code caching as a user has it (some sandboxes set PYTHONDONTWRITEBYTECODE, which makes every run
    # process recompile whatever source changed since its .pyc was written).
    base_env.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.update({k: v for k, v in base_env.items() if k not in ("DAGSTER_HOME", "PYTHONPATH")})
    os.environ["DAGSTER_HOME"] = str(work)  # never the repository's .dagster_home

    from hsi_dagster.llm.embedded import EmbeddedServerProcess

    signal.signal(signal.SIGTERM, _interrupt)
    procs = Processes()
    sampler = LoadSampler()
    sampler.start()
    server = None
    log = open(work / "processes.log", "w")  # noqa: SIM115 - shared by every process started, closed in finally
    result: dict[str, Any] = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "load_at_start": load_average(),
        "started": datetime.now(UTC).isoformat(),
    }
    lanes: dict[str, Lane] = {}
    results: dict[str, LaneResult] = {}
    receiver = AlertReceiver()
    base_env["ALERT_WEBHOOK_URL"] = receiver.url
    try:
        server = EmbeddedServerProcess(
            {"PARALLEL": args.parallel, "CTX_SIZE": SLOT_CONTEXT * args.parallel}, log_path=str(work / "llama.log")
        ).start()
        base_env["LLAMA_SERVER_URL"] = os.environ["LLAMA_SERVER_URL"] = server.url
        print(f"work dir {work}; llama.cpp server {server.url} with {args.parallel} slots; load {load_average():.2f}")
        if not args.no_micro:
            result["micro"] = micro({**base_env, "DAGSTER_HOME": str(work)}, work, server.url)
            print("micro:", json.dumps(result["micro"]), flush=True)
        source: list[StreamFile] | None = None
        for name in lanes_wanted:
            lanes[name] = Lane(name, work, base_env, work / f"{name}_inbox")
            results[name] = run_lane(name, lanes[name], args, work, procs, log, sampler, source, receiver)
            source = source or results[name].files
        table = batch_table(
            {name: res.expected for name, res in results.items()}, {n: r.data for n, r in results.items()}
        )
        result["batches"] = table
        for name, res in results.items():
            result[name] = lane_figures(name, lanes[name], res, table, args.parallel)
        result["complete"] = True
    finally:
        # A second Ctrl-C or SIGTERM must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        procs.stop_all()
        if server is not None:
            server.stop()
        sampler.stop_event.set()
        log.close()
        if args.json and result.get("complete"):
            args.json.write_text(json.dumps(result, indent=1, default=str))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    report(result, list(results))
    return 0


ORCHESTRATORS = ("daemon", "dev", "managed")


def start_orchestrator(kind: str, lane: Lane, work: Path, procs: Processes, log) -> subprocess.Popen:
    """Start the lane's Dagster processes in the work directory (Dagster loads a `.env` from the working directory
    into the code server; the repository's would point the runs elsewhere). Returns the process to watch."""
    from hsi_dagster.llm.embedded import free_port

    workspace = work / "workspace.yaml"
    module = "load_from:\n  - python_module:\n      module_name: hsi_dagster.definitions\n"
    if kind == "managed":
        workspace.write_text(module)
        return procs.start(
            "dagster-daemon",
            [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
            env=lane.env,
            cwd=work,
            log=log,
        )
    if kind == "dev":
        workspace.write_text(module)
        argv = [str(BIN / "dagster"), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(free_port())]
        return procs.start("dagster dev", argv, env=lane.env, cwd=work, log=log)
    port = free_port()
    procs.start(
        "dagster code-server",
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
        ],
        env=lane.env,
        cwd=work,
        log=log,
    )
    workspace.write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: hsi_dagster\n"
    )
    return procs.start(
        "dagster-daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], env=lane.env, cwd=work, log=log
    )


def wait_for_sensors(log_file: Path, daemon: subprocess.Popen, names: tuple[str, ...], timeout: float = 180.0) -> None:
    """The daemon, its code server and the sensors are up (each has ticked once) before the stream starts, so
    start-up is not counted."""
    deadline = time.monotonic() + timeout
    while True:
        text = log_file.read_text(errors="replace")
        if all(f"sensor: {name}" in text for name in names):
            return
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not tick {names} (see {log_file})")
        time.sleep(0.5)


def report(result: dict[str, Any], lanes: list[str]) -> None:
    for lane in lanes:
        stream = result[lane]["stream"]
        print(
            f"\n{lane}: stream of {stream['files']} files, {stream['detections']} detections, {stream['windows']} "
            f"windows ({stream['fast_path_windows']} fast-path) in {stream['seconds']:.0f}s; "
            f"load {result[lane]['load']}"
        )
    print("\nper batch (seconds from the window's close; overhead = close -> stored - LLM):")
    header = f"{'batch':<48} {'reason':<9}"
    for lane in lanes:
        header += f" | {lane + ' stored':>13} {'LLM':>6} {'overhead':>8} {'slotwait':>8}"
    print(header)
    for row in result["batches"]:
        line = f"{row['batch_id'][:48]:<48} {row['reason']:<9}"
        for lane in lanes:
            got = row.get(lane)
            line += (
                f" | {got['close_to_stored_s']:>13.1f} {got['llm_s']:>6.1f} {got['overhead_s']:>8.1f}"
                f" {got.get('llm_slot_wait_s', 0.0):>8.1f}"
                if got
                else f" | {'missing':>13} {'':>6} {'':>8} {'':>8}"
            )
        print(line)
    for lane in lanes:
        f = result[lane]
        print(f"\n{lane}: overhead {summary(f['overhead'])}")
        print(f"{lane}: overhead less waits for a busy LLM slot {summary(f['overhead_less_llm_slot_wait'])}")
        print(f"{lane}: window closed -> row stored {summary(f['close_to_stored'])}; LLM {summary(f['llm'])}")
        print(f"{lane}: ingest lag per file {summary(f['ingest_lag'])}")
        print(f"{lane}: exactly once: {json.dumps(f['exactly_once'])}")
        print(f"{lane}: DuckDB open_connection: {json.dumps(f['lock_waits'])}")
        print(f"{lane}: runs {f['runs']}")
        for title, stages in (("batch stages", f.get("stages", {})), ("ingest stages", f.get("ingest_stages", {}))):
            if stages:
                print(f"{lane} {title} (median, p90):")
                for name, values in stages.items():
                    print(f"  {name:<55} {statistics.median(values):7.2f} {p90(values):7.2f}  n={len(values)}")
        if "sensors" in f:
            print(f"{lane}: sensors {json.dumps(f['sensors'])}")
        if f.get("evidence_alerts"):
            e = f["evidence_alerts"]
            print(
                f"{lane}: evidence-only alerts: {e['files']} files, {e['alerts']} alerts, {e['posts']} posted, "
                f"{e['duplicate_posts']} duplicate posts, missing {e['missing']}"
            )
            print(f"{lane}: inbox file written -> evidence alert stored {summary(e['file_to_stored'])}")
            print(f"{lane}: inbox file written -> evidence alert posted {summary(e['file_to_posted'])}")
    for lane in lanes:
        print(summary_line(lane, result))


def summary_line(lane: str, result: dict[str, Any]) -> str:
    """One line per lane with what the acceptance of #17 reads (median overhead <= 5 s, ingest lag <= 15 s, nothing
    lost or duplicated), the rate and the load average."""
    f = result[lane]
    once = f["exactly_once"]

    def med(values: list[float]) -> str:
        values = [v for v in values if v is not None]
        return f"{statistics.median(values):.1f}s (p90 {p90(values):.1f}s)" if values else "n/a"

    lost = len(once["missing_batches"]) + len(once["unassessed"]) + once["unassigned_detections"]
    duplicated = len(once["extra_batches"]) + len(once["runs_not_exactly_one_success"])
    split = len(once["windows_with_other_detections"])
    return (
        f"SUMMARY {lane}: rate {result['args']['rate']}/s, {f['stream']['windows']} windows; median overhead "
        f"{med(f['overhead'])}; ingest lag {med(f['ingest_lag'])}; LLM {med(f['llm'])}; lost {lost}, "
        f"duplicated {duplicated}, split windows {split}; load {f['load']}"
    )


if __name__ == "__main__":
    sys.exit(main())
