"""Sensor and daemon restarts during a live stream (#15 item 4): no batch skipped or repeated.

Real parts, as production runs them: `dagster code-server start` and `dagster-daemon run` pointed at it (how
`dagster dev` and docker-compose.prod.yml start them) on a temporary DAGSTER_HOME with the repository's
dagster.yaml, the real embedded llama.cpp server (session fixture), `hsi simulate --live` writing a file a second
into HSI_INBOX_DIR. Mid-stream the daemon (and with it every sensor) is SIGKILLed and restarted, later SIGTERMed
and restarted. Then the stream's windows close and the test waits until every detection is in a batch and every
batch assessed, and checks by behaviour, whatever the mechanism (ingest runs or ingest in the sensor tick): every
detection written to the inbox stored once and in exactly one batch (none quarantined, none lost), one
`risk_assessments` row per batch, one successful run per batch partition.

Short windows (30 s, 10 s idle) and no fast path (FAST_PATH_CONFIDENCE=1.0) keep the LLM work to a handful of
batches: SmolLM2 on 2 cores assesses one in ~5-15 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance import InstanceRef

from hsi_dagster.cli.instance import apply_pool_limits
from hsi_dagster.core.intake.batching import BatchRules, DetectionRef, assign_batches
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.sensors.inbox_archive import PROCESSED_DIR
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.storage.db import connect
from tests.reliability.stream_ledger import Ledger, ledger, successful_runs_per_partition

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STREAM_SECONDS = 30
RATE = 2.0  # detections a second over the simulator's 5 cameras: `hsi simulate --live`'s default
KILL_AT, TERM_AT = 9.0, 19.0  # seconds into the stream
SETTINGS = {
    "CTX_SIZE": "8192",
    "PARALLEL": "2",
    "THREADS": "2",
    "NEMOTRON_MAX_OUTPUT_TOKENS": "256",
    "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    "BATCH_WINDOW_SECONDS": "30",
    "BATCH_IDLE_TIMEOUT_SECONDS": "10",
    "FAST_PATH_CONFIDENCE": "1.0",
    "LLM_STARTUP_TIMEOUT_SECONDS": "60",
}
ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


class Group:
    """Processes started here, each in its own session; stopped with their whole process group."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.work / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv, cwd=self.work, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    @staticmethod
    def signal(proc: subprocess.Popen, sig: int, wait: float = 30.0) -> int | None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)
        return proc.poll()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                self.signal(proc, signal.SIGTERM, 20)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # run processes the code server spawned
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


def _wait(what: str, done: Callable[[], bool], timeout: float, alive: Callable[[], str | None]) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        problem = alive()
        assert problem is None, f"waiting for {what}: {problem}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s"
        time.sleep(1.0)


def _sensors_ticked(log: Path) -> bool:
    text = log.read_text(errors="replace") if log.exists() else ""
    return all(f"sensor: {name}" in text for name in ("inbox_sensor", "batch_window_sensor"))


def _stream(inbox: Path) -> list[dict]:
    """Every record the stream wrote: in the inbox, or moved to <inbox>/.processed/ once loaded (inbox_archive.py)."""
    paths = sorted([*inbox.glob("*.jsonl"), *(inbox / PROCESSED_DIR).glob("*.jsonl")], key=lambda p: p.name)
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def test_daemon_killed_and_terminated_mid_stream_every_window_assessed_once(llama_server, tmp_path: Path) -> None:
    work, home, inbox, db = tmp_path / "work", tmp_path / "home", tmp_path / "inbox", tmp_path / "hsi.duckdb"
    for folder in (work, home, inbox):
        folder.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    env = {name: value for name, value in os.environ.items() if name not in HsiSettings.model_fields}
    env.update(SETTINGS, HSI_ENV_FILE=os.devnull, DAGSTER_HOME=str(home), HSI_DUCKDB_PATH=str(db),
               HSI_INBOX_DIR=str(inbox), LLAMA_SERVER_URL=llama_server.url, PYTHONUNBUFFERED="1")  # fmt: skip
    settings = load_settings(os.devnull, **{**SETTINGS, "LLAMA_SERVER_URL": llama_server.url})
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    apply_pool_limits(instance, settings)  # what every `hsi` command does to its instance: llama_slots = PARALLEL

    port = free_port()
    (work / "workspace.yaml").write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: hsi_dagster\n"
    )
    group = Group(work, env)
    daemon_argv = [str(BIN / "dagster-daemon"), "run", "-w", str(work / "workspace.yaml")]
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        code_server = group.start("code-server", [str(BIN / "dagster"), "code-server", "start", "-m",
                                                  "hsi_dagster.definitions", "-h", "127.0.0.1", "-p", str(port),
                                                  "--location-name", "hsi_dagster"])  # fmt: skip
        daemon = group.start("daemon-1", daemon_argv)

        def alive() -> str | None:
            if code_server.poll() is not None:
                return f"the code server exited with {code_server.returncode}"
            return None if daemon.poll() is None else f"the daemon exited with {daemon.returncode}"

        _wait("first sensor ticks", lambda: _sensors_ticked(work / "daemon-1.log"), 180, alive)
        marks["daemon up"] = time.monotonic() - t0
        stream_argv = [str(BIN / "hsi"), "simulate", "--live", "--inbox", str(inbox), "--rate", str(RATE),
                       "--seconds", str(STREAM_SECONDS), "--seed", "15"]  # fmt: skip
        simulator = group.start("simulate", stream_argv)
        stream_start = time.monotonic()

        time.sleep(max(0.0, stream_start + KILL_AT - time.monotonic()))
        assert simulator.poll() is None, "the stream ended before the kill"
        killed = group.signal(daemon, signal.SIGKILL, 10)
        marks["SIGKILL"] = time.monotonic() - t0
        daemon = group.start("daemon-2", daemon_argv)
        _wait("sensor ticks after the SIGKILL", lambda: _sensors_ticked(work / "daemon-2.log"), 180, alive)

        time.sleep(max(0.0, stream_start + TERM_AT - time.monotonic()))
        assert simulator.poll() is None, "the stream ended before the SIGTERM"
        terminated = group.signal(daemon, signal.SIGTERM, 30)
        marks["SIGTERM"] = time.monotonic() - t0
        daemon = group.start("daemon-3", daemon_argv)
        assert simulator.wait(STREAM_SECONDS + 60) == 0
        marks["stream end"] = time.monotonic() - t0

        records = _stream(inbox)
        ids = [r["detection_id"] for r in records]
        assert records, "the stream wrote no detections"
        rules = BatchRules.from_settings(settings)
        refs = [
            DetectionRef(r["detection_id"], r["camera_id"], datetime.fromisoformat(r["ts"].replace("Z", "+00:00")),
                         r["label"], r["confidence"])
            for r in records
        ]  # fmt: skip
        windows = assign_batches(refs, rules)
        last_close = max(w.closes_at for w in windows)
        state: dict[str, Ledger] = {}

        def finished() -> bool:
            if datetime.now(UTC) < last_close + timedelta(seconds=2) or instance.get_run_records(
                filters=dg.RunsFilter(statuses=ACTIVE), limit=1
            ):
                return False
            with contextlib.suppress(FileNotFoundError):
                state["ledger"] = now = ledger(db, ids)
                return now.stored == len(ids) and now.waiting == 0 and not now.unassessed
            return False

        _wait("every window assessed", finished, 420, alive)
        marks["all assessed"] = time.monotonic() - t0
    finally:
        group.stop_all()

    with instance:
        runs = successful_runs_per_partition(instance)
        batch_runs = instance.get_run_records(filters=dg.RunsFilter(job_name="batch_pipeline"))
    final = ledger(db, ids, successful_runs=runs)
    failed = [r for r in batch_runs if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS]
    print(
        f"\n{len(ids)} detections in {len(list(inbox.glob('**/*.jsonl')))} files, {len(windows)} windows; "
        f"{final.row()}; statuses {final.statuses}; batch runs {len(batch_runs)} ({len(failed)} not successful); "
        f"daemon-1 after SIGKILL {killed}, daemon-2 after SIGTERM {terminated}; "
        + ", ".join(f"{k} {v:.0f}s" for k, v in marks.items())
    )
    assert killed == -signal.SIGKILL and terminated is not None, (killed, terminated)
    assert final.lost == [] and final.quarantined == 0, final
    assert final.stored == final.batched == len(ids), final
    assert final.duplicates == 0, (final.duplicate_detections, final.count_mismatches, final.extra_runs)
    assert final.unassessed == [] and final.assessments == final.batches >= len(windows), final
    assert set(runs) == recorded_batches(db), "a successful run for every batch and only for batches"
    assert set(final.statuses) <= {"ok", "invalid_output"}, final.statuses


def recorded_batches(db: Path) -> set[str]:
    with connect(db, read_only=True) as conn:
        return {batch_id for (batch_id,) in conn.execute("SELECT batch_id FROM detection_batches").fetchall()}
