"""One precedence wherever Dagster starts: the process environment over the settings file (`hsi.env`).

A REAL `dagster dev` (webserver, daemon and code server, as a user starts them) runs in a working directory with
the project's settings file and a Dagster `.env`, under a temporary DAGSTER_HOME; the sensors' own skip reasons,
read from the instance's tick records, show which values the code server used. Dagster's commands load a `.env`
from the working directory over the environment (dagster/_cli/utils.py), which is why the project's file is
`hsi.env`: on main, with the settings in `.env`, exported HSI_DUCKDB_PATH / HSI_INBOX_DIR lost to the file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
from dagster._core.instance import InstanceRef
from dagster._core.scheduler.instigation import TickData, TickStatus

from hsi_dagster.llm.embedded import free_port
from hsi_dagster.settings import HsiSettings

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEADLINE_S = 240


def _outcome(tick: TickData) -> str:
    if tick.status == TickStatus.SKIPPED:
        return tick.skip_reason or ""
    return f"{tick.status.value}: {tick.error.message if tick.error else ''}"


def _skip_reasons(home: Path) -> dict[str, list[str]]:
    """What each instigator's finished ticks said, newest first (skip reason, or status and error)."""
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        return {
            state.instigator_name: [
                _outcome(tick.tick_data)
                for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5)
                if tick.status != TickStatus.STARTED  # still being evaluated
            ]
            for state in instance.all_instigator_state()
        }


def _stop(process: subprocess.Popen) -> None:
    """Ctrl-C for the whole process group (dagster dev and everything it started), then SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # children that outlive dagster dev
    process.wait(timeout=30)


def test_dagster_dev_sensors_use_exported_values_over_the_settings_file(tmp_path: Path) -> None:
    work, home = tmp_path / "project", tmp_path / "dagster_home"
    work.mkdir()
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    exported_inbox, file_inbox, file_db = tmp_path / "exported-inbox", tmp_path / "file-inbox", tmp_path / "file.duckdb"
    (work / "hsi.env").write_text(f"HSI_INBOX_DIR={file_inbox}\nHSI_DUCKDB_PATH={file_db}\n", encoding="utf-8")
    (work / ".env").write_text("HSI_PRECEDENCE_PROBE=loaded-by-dagster\n", encoding="utf-8")  # Dagster's own file
    env = {name: value for name, value in os.environ.items() if name not in HsiSettings.model_fields}
    env.pop("HSI_ENV_FILE", None)  # the default: hsi.env in the working directory
    env.update(DAGSTER_HOME=str(home), HSI_INBOX_DIR=str(exported_inbox), PYTHONUNBUFFERED="1")
    log_path = tmp_path / "dagster-dev.log"
    command = [str(BIN / "dagster"), "dev", "-m", "hsi_dagster.definitions", "-h", "127.0.0.1", "-p", str(free_port())]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    reasons: dict[str, list[str]] = {}
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text(errors="replace")[-3000:]
            if (home / "schedules").exists():
                reasons = _skip_reasons(home)
                if reasons.get("inbox_sensor") and reasons.get("batch_window_sensor"):
                    break
            time.sleep(2)
    finally:
        _stop(process)
    log = log_path.read_text(errors="replace")
    assert reasons.get("inbox_sensor") and reasons.get("batch_window_sensor"), (
        f"no sensor ticks within {DEADLINE_S} s: {reasons}\n{log[-3000:]}"
    )
    # exported beats the settings file ...
    assert all(reason == f"no inbox folder at {exported_inbox}" for reason in reasons["inbox_sensor"]), reasons
    # ... and the file still supplies what is not exported
    assert all(f"no database at {file_db} yet" in reason for reason in reasons["batch_window_sensor"]), reasons
    # Dagster did load its .env in this run: the precedence holds with its loader active
    assert "Loaded environment variables from .env file: HSI_PRECEDENCE_PROBE" in log
