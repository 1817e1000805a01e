"""Acceptance (#16 item 4): the llama-server's slots hold on every launch path at once.

2 x PARALLEL batches run at the same time through three paths, each in its own processes as a user starts them:
two runs that a real `dagster-daemon` launches from the batch sensor through the queued run coordinator, a
`dagster asset materialize` subprocess, and `hsi process`. Every process knows only the URL of a counting proxy in
front of the real embedded llama.cpp server (tests/support/counting_proxy.py), which records how many completions
the clients had in flight. The proxy holds completions until all four runs have reached their LLM step, so every
path wants the server at the same moment; the processes share nothing but HSI_SLOT_LEASE_DIR.

Why staged, not all four launched in the same second: the run-granularity `llama_slots` pool counts every run in
progress, whoever started it, so a daemon that sees the CLI's runs first keeps its own queued (the launch gate at
work) and the paths would not mix. The daemon's runs start first, then the CLI paths join them.

The daemon's runs write one DuckDB file, the CLI paths another: the batch sensor requests every closed window of its
file, so a batch in the same file would be run by the sensor too. What is under test is the one server they share.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster._core.instance import InstanceRef

from hsi_dagster.definitions import build_resources
from hsi_dagster.llm.client import LlamaClient
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.resources import LlamaServerResource
from hsi_dagster.settings import HsiSettings, load_settings
from tests.support.counting_proxy import CountingProxy
from tests.support.dagster_procs import start_code_server
from tests.support.llm_fixtures import RunningLlama
from tests.support.pipeline_helpers import closed_windows
from tests.support.processes import start_logged

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEADLINE_S = 300  # the whole scenario; about a minute on an idle machine
LLM_STEP = "risk_assessments"  # the first step that sends completions (the schema probe, then the assessment)


def test_settings_give_every_client_the_lease_directory(tmp_path: Path) -> None:
    """HSI_SLOT_LEASE_DIR reaches the resource and the clients it builds (router included)."""
    settings = load_settings(os.devnull, HSI_SLOT_LEASE_DIR=str(tmp_path), LLAMA_SERVER_URL="http://127.0.0.1:9")
    llm = build_resources(settings)["llm"]
    assert isinstance(llm, LlamaServerResource)
    assert llm.slot_lease_dir == str(tmp_path) and llm.get_client().slot_lease_dir == str(tmp_path)
    routed = build_resources(load_settings(os.devnull, LLAMA_SERVER_URL="http://127.0.0.1:9,http://127.0.0.1:10"))
    router = routed["llm"].get_router() if isinstance(routed["llm"], LlamaServerResource) else None
    assert router is not None and [c.slot_lease_dir for c in router.clients] == [None, None]  # None = the default dir


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (a daemon's runs, a code server's run workers, `hsi process` workers), then KILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=20)


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def _assessments(db: Path) -> list[tuple[str, int]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute("SELECT batch_id, completion_tokens FROM risk_assessments ORDER BY batch_id").fetchall()


def _at_llm_step(instance: dg.DagsterInstance, run_id: str) -> bool:
    starts = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    return any(event.step_key == LLM_STEP for event in starts)


@pytest.mark.slow
@pytest.mark.llm
def test_slots_hold_across_daemon_cli_materialize_and_hsi_process(tmp_path: Path, llama_server: RunningLlama) -> None:
    parallel = llama_server.settings.PARALLEL
    work, home = tmp_path / "work", tmp_path / "dagster_home"
    work.mkdir()
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    daemon_db, cli_db, leases = tmp_path / "daemon.duckdb", tmp_path / "cli.duckdb", tmp_path / "slot-leases"
    proxy = CountingProxy(llama_server.url, gated=True).start()
    # The schema probe's pass, taken first with the gate open and shared by every process (HSI_PROBE_CACHE_DIR):
    # without it the first process would probe at the closed gate while the others wait for its verdict
    # (probe_cache.probe_once), and only one completion would be in flight there.
    verdicts = tmp_path / "probe-verdicts"
    proxy.gate.set()
    with LlamaClient(proxy.url, probe_cache_dir=verdicts) as client:
        client.ensure_ready()
    proxy.gate.clear()
    base = {name: value for name, value in os.environ.items() if name not in HsiSettings.model_fields}
    base.update(
        DAGSTER_HOME=str(home),
        HSI_ENV_FILE=os.devnull,
        HSI_INBOX_DIR=str(tmp_path / "no-inbox"),  # no inbox folder: the batch sensor plans from the database
        LLAMA_SERVER_URL=proxy.url,  # the only URL any process is given
        HSI_SLOT_LEASE_DIR=str(leases),
        HSI_PROBE_CACHE_DIR=str(verdicts),
        CTX_SIZE=str(llama_server.settings.CTX_SIZE),
        PARALLEL=str(parallel),
        NEMOTRON_MAX_OUTPUT_TOKENS="256",  # SmolLM2 on 2 shared cores: short replies
        PROMPT_SAFETY_MARGIN_TOKENS="256",
        LLM_READ_TIMEOUT_SECONDS="600",  # completions wait at the gate: no read timeout (and retry) meanwhile
        PYTHONUNBUFFERED="1",
    )
    daemon_env, cli_env = {**base, "HSI_DUCKDB_PATH": str(daemon_db)}, {**base, "HSI_DUCKDB_PATH": str(cli_db)}
    now = datetime.now(UTC)
    # The daemon's file: PARALLEL cameras, one closed batch each. The CLI file: garage (for `dagster asset
    # materialize`) and, an hour earlier, yard (for `hsi process --as-of` between the two: only yard is closed then).
    daemon_cameras = [f"cam{n}" for n in range(parallel)]
    (tmp_path / "daemon.jsonl").write_text("\n".join(closed_windows(daemon_cameras, 1, start=now - timedelta(hours=2))))
    cli_lines = closed_windows(["garage"], 1, start=now - timedelta(hours=2))
    cli_lines += closed_windows(["yard"], 1, start=now - timedelta(hours=3))
    (tmp_path / "cli.jsonl").write_text("\n".join(cli_lines) + "\n")
    hsi, dagster = str(BIN / "hsi"), str(BIN / "dagster")
    logs = {name: tmp_path / f"{name}.log" for name in ("code-server", "daemon", "materialize", "process")}

    port = free_port()
    (work / "workspace.yaml").write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: hsi_dagster\n"
    )
    started: list[subprocess.Popen] = []
    instance: dg.DagsterInstance | None = None
    try:
        # The CLI file first (`hsi ingest` also creates the instance and sets llama_slots = PARALLEL on it).
        setup = subprocess.run([hsi, "ingest", str(tmp_path / "cli.jsonl")], cwd=work, env=cli_env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert setup.returncode == 0 and "2 closed batches registered" in setup.stdout, setup.stdout + setup.stderr
        instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
        pools = {pool.name: pool.limit for pool in instance.event_log_storage.get_pool_limits()}
        assert pools.get("llama_slots") == parallel, pools
        # The daemon and its code server, as `dagster dev` starts them.
        location = ["-m", "hsi_dagster.definitions", "--location-name", "hsi_dagster"]
        started.append(start_code_server(location, port, daemon_env, work, logs["code-server"], DEADLINE_S))
        started.append(start_logged([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], daemon_env, work,
                              logs["daemon"]))  # fmt: skip
        deadline = time.monotonic() + DEADLINE_S

        def runs() -> list[dg.DagsterRun]:
            assert instance is not None
            return list(instance.get_runs())

        def wait_for(what: str, condition) -> None:
            while not condition():
                for process in started:
                    assert process.poll() in (None, 0), f"{process.args!r} exited {process.returncode}: {logs}"
                assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s; runs {runs()}"
                time.sleep(0.5)

        # 1. PARALLEL batches reach the daemon's sensor; its runs start and wait at the proxy's gate.
        ingest = subprocess.run([hsi, "ingest", str(tmp_path / "daemon.jsonl")], cwd=work, env=daemon_env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        wait_for(
            "the daemon's runs at their LLM step",
            lambda: sum(_at_llm_step(instance, run.run_id) for run in runs()) >= parallel,
        )
        # 2. The CLI paths join: one batch each.
        cli_batch = next(key for key in instance.get_dynamic_partitions("batches") if key.startswith("garage"))
        materialize = [dagster, "asset", "materialize", "-m", "hsi_dagster.definitions", "--select", "group:pipeline",
                       "--partition", cli_batch]  # fmt: skip
        started.append(start_logged(materialize, cli_env, work, logs["materialize"]))
        as_of = (now - timedelta(hours=2, minutes=30)).isoformat()
        started.append(start_logged([hsi, "process", "--as-of", as_of], cli_env, work, logs["process"]))
        # 3. All 2 x PARALLEL runs are at their LLM step: open the gate (a moment later, so each has sent or is
        # waiting to send its first completion).
        wait_for(
            "every path's run at its LLM step",
            lambda: sum(_at_llm_step(instance, run.run_id) for run in runs()) >= 2 * parallel,
        )
        time.sleep(2.0)
        waiting_at_gate = proxy.in_flight
        proxy.gate.set()
        # 4. Everything finishes.
        cli_processes = started[2:]
        wait_for("the CLI paths to exit", lambda: all(p.poll() is not None for p in cli_processes))
        assert [p.returncode for p in cli_processes] == [0, 0], _tail(logs["materialize"]) + _tail(logs["process"])
        wait_for("the daemon's runs to finish", lambda: all(run.is_finished for run in runs()))
        all_runs = runs()
    finally:
        proxy.gate.set()
        for process in reversed(started):
            _stop(process)
        proxy.stop()
        if instance is not None:
            instance.dispose()

    report = f"max in flight {proxy.max_in_flight}, {len(proxy.completions)} completions, logs in {tmp_path}"
    assert [run.status for run in all_runs] == [dg.DagsterRunStatus.SUCCESS] * 2 * parallel, (
        f"{all_runs}\n{_tail(logs['code-server'])}"
    )
    sources = sorted(
        "sensor" if "dagster/sensor_name" in run.tags else run.tags.get("hsi/source", "cli") for run in all_runs
    )
    assert sources == sorted(["sensor"] * parallel + ["cli", "hsi process"]), sources
    # Every batch has exactly one assessment, answered by the model (through the proxy: the only URL given).
    daemon_rows, cli_rows = _assessments(daemon_db), _assessments(cli_db)
    assert sorted(batch.split("__")[0] for batch, _ in daemon_rows) == daemon_cameras, daemon_rows
    assert sorted(batch.split("__")[0] for batch, _ in cli_rows) == ["garage", "yard"], cli_rows
    assert all(tokens and tokens > 0 for _, tokens in daemon_rows + cli_rows)
    assert all(c.status == 200 for c in proxy.completions) and len(proxy.completions) >= 2 * parallel, report
    # The bound: never more than PARALLEL completions in flight, although 2 x PARALLEL runs wanted one at once.
    assert waiting_at_gate == parallel, f"{waiting_at_gate} at the gate; {report}"
    assert proxy.max_in_flight == parallel and proxy.overlaps() == parallel, report
