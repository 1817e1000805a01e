"""WarmProcessRunLauncher (dagster.yaml) with a REAL code server and `dagster-daemon`: runs start in pre-imported
workers, terminate and run monitoring work from the pid tag alone (as in the webserver), edited code never runs
stale, and no worker outlives the daemon. The code location is a copy of tests/support/launcher_location.py in
tmp_path (a quick job and a job that sleeps), so no LLM and no hsi settings are involved.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.code_pointer import FileCodePointer
from dagster._core.instance import InstanceRef
from dagster._core.launcher import WorkerStatus
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.test_utils import create_run_for_test
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import serialize_value

from hsi_dagster.instance.launcher import PID_TAG, WORKER_MODULE, WarmProcessRunLauncher
from hsi_dagster.llm.embedded import free_port
from tests.support.dagster_procs import start_code_server, submit_run
from tests.support.processes import start_logged, stop_group, wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Deadlines for a loaded 2-core machine (other suites, an LLM): a code server or a warm worker importing dagster
# and the definitions can take a minute there, against seconds on a quiet one. Waits end as soon as the condition
# holds, so a quiet machine is not slowed down.
STARTUP_S, RUN_S, EXIT_S = 240, 180, 60


@dataclass
class Orchestrator:
    instance: dg.DagsterInstance
    daemon: subprocess.Popen
    workspace: Path
    location: Path
    daemon_log: Path

    def run(self, job_name: str) -> dg.DagsterRun:
        return submit_run(self.instance, self.workspace, job_name)

    def wait(self, run_id: str, until, what: str) -> dg.DagsterRun:
        def reached() -> dg.DagsterRun | None:
            run = self.instance.get_run_by_id(run_id)
            assert run is not None
            assert self.daemon.poll() is None, self.daemon_log.read_text(errors="replace")[-3000:]
            return run if until(run) else None

        try:
            return wait_for(f"{what} (run {run_id})", reached, RUN_S)
        except TimeoutError as exc:
            run = self.instance.get_run_by_id(run_id)
            raise AssertionError(f"{exc}: run {run and run.status}; {self.daemon_log.read_text()[-3000:]}") from None

    def finished(self, run_id: str) -> dg.DagsterRun:
        return self.wait(run_id, lambda run: run.is_finished, "run to finish")

    def launch_message(self, run_id: str) -> str:
        messages = [e.message for e in self.instance.all_logs(run_id) if "worker process (pid" in (e.message or "")]
        assert len(messages) == 1, messages
        return messages[0]

    def workers(self) -> dict[int, bool]:
        """This location's idle run_worker processes (stdin still the launcher's pipe), pid -> ready (it closed its
        --ready-fd)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if WORKER_MODULE.encode() in argv and str(self.location).encode() in b" ".join(argv):
                try:
                    if not os.readlink(entry / "fd" / "0").startswith("pipe:"):
                        continue  # it read its run and runs it
                except OSError:
                    continue
                fd = argv[argv.index(b"--ready-fd") + 1].decode()
                found[int(entry.name)] = not (entry / "fd" / fd).exists()
        return found

    def wait_for_ready_workers(self) -> set[int]:
        """The pids of the idle workers that finished their imports, once there is at least one (dagster.yaml keeps
        `warm_workers` of them; the launcher hands a run to a ready one first)."""
        wait_for("a warm worker to finish its imports (closed --ready-fd)", lambda: any(self.workers().values()), RUN_S)
        return {pid for pid, ready in self.workers().items() if ready}


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Orchestrator]:
    tmp = tmp_path_factory.mktemp("warm_launcher")
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    location = tmp / "launcher_location.py"
    shutil.copy(REPO / "tests/support/launcher_location.py", location)
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    port = free_port()
    (tmp / "workspace.yaml").write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {port}\n      location_name: loc\n"
    )
    daemon_log = tmp / "daemon.log"
    # The storage first: three processes creating a fresh SQLite schema at once race in alembic.
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    code_server = start_code_server(
        ["-f", str(location), "-d", str(tmp), "--location-name", "loc"],
        port,
        env,
        tmp,
        tmp / "code-server.log",
        STARTUP_S,
    )
    daemon = None
    try:
        daemon = start_logged(
            [str(BIN / "dagster-daemon"), "run", "-w", str(tmp / "workspace.yaml")], env, tmp, daemon_log
        )

        def queue_running() -> bool:
            assert daemon is not None and daemon.poll() is None, daemon_log.read_text(errors="replace")[-3000:]
            return "QueuedRunCoordinatorDaemon" in daemon_log.read_text(errors="replace")

        wait_for("the daemon's run queue (QueuedRunCoordinatorDaemon in daemon.log)", queue_running, STARTUP_S)
        assert isinstance(instance.run_launcher, WarmProcessRunLauncher)  # dagster.yaml names it
        yield Orchestrator(instance, daemon, tmp / "workspace.yaml", location, daemon_log)
    finally:
        if daemon is not None:
            stop_group(daemon)
        stop_group(code_server, grace_s=5)  # it waits up to 60 s for open RPC calls; it keeps no state
        instance.dispose()


def test_the_next_run_starts_in_the_pre_started_worker(orchestrator: Orchestrator) -> None:
    first = orchestrator.finished(orchestrator.run("quick_job").run_id)
    assert first.status == dg.DagsterRunStatus.SUCCESS
    ready = orchestrator.wait_for_ready_workers()  # replacements started after the first launch
    second = orchestrator.finished(orchestrator.run("quick_job").run_id)
    assert second.status == dg.DagsterRunStatus.SUCCESS
    warm_pid = int(second.tags[PID_TAG])
    assert warm_pid in ready and second.tags[PID_TAG] != first.tags[PID_TAG]
    assert orchestrator.launch_message(second.run_id).endswith(f"a warm worker process (pid: {warm_pid}).")
    started = [e.message for e in orchestrator.instance.all_logs(second.run_id) if "Started process" in e.message]
    assert started == [f"Started process for run (pid: {warm_pid})."]  # Dagster's own run body, in that worker


def test_terminate_cancels_a_running_run_and_its_process_ends(orchestrator: Orchestrator) -> None:
    orchestrator.wait_for_ready_workers()
    run_id = orchestrator.run("sleepy_job").run_id
    step_starts = lambda: orchestrator.instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)  # noqa: E731
    orchestrator.wait(run_id, lambda run: any(e.step_key == "sleepy" for e in step_starts()), "the sleepy step")
    run = orchestrator.instance.get_run_by_id(run_id)
    assert run is not None and "warm worker" in orchestrator.launch_message(run_id)
    pid = int(run.tags[PID_TAG])
    # The test process's own launcher, built from dagster.yaml: it knows the run only by its tag (as the webserver).
    launcher = orchestrator.instance.run_launcher
    assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
    assert launcher.terminate(run_id) is True
    canceled = orchestrator.finished(run_id)
    assert canceled.status == dg.DagsterRunStatus.CANCELED
    # The daemon reaps it: no zombie either.
    wait_for(
        f"run worker {pid} to be gone after its run was canceled", lambda: not Path(f"/proc/{pid}").exists(), EXIT_S
    )
    health = launcher.check_run_worker_health(canceled)
    assert health.status == WorkerStatus.FAILED and str(pid) in (health.msg or "")
    assert launcher.terminate(run_id) is False  # finished: nothing to terminate
    untagged = dg.DagsterRun(job_name="sleepy_job", run_id="not-launched")
    assert launcher.check_run_worker_health(untagged).status == WorkerStatus.UNKNOWN


def test_code_edited_after_the_pre_load_runs_cold_and_fresh(orchestrator: Orchestrator) -> None:
    ready = orchestrator.wait_for_ready_workers()
    os.utime(orchestrator.location)  # a developer saved the file while `dagster dev` runs
    run = orchestrator.finished(orchestrator.run("quick_job").run_id)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    warm_pid = int(run.tags[PID_TAG])
    assert warm_pid in ready
    assert orchestrator.launch_message(run.run_id).endswith(f"a warm worker process (pid: {warm_pid}).")
    log = orchestrator.daemon_log.read_text(errors="replace")
    assert f"(pid {warm_pid}): code changed since pre-load ({orchestrator.location}); running cold" in log
    started = [e.message for e in orchestrator.instance.all_logs(run.run_id) if "Started process" in e.message]
    assert started == [f"Started process for run (pid: {warm_pid})."]  # execv: same pid, a fresh interpreter


def test_no_idle_worker_outlives_the_daemon(orchestrator: Orchestrator) -> None:
    orchestrator.finished(orchestrator.run("quick_job").run_id)  # a launch leaves a warm worker behind
    assert orchestrator.wait_for_ready_workers()
    orchestrator.daemon.send_signal(signal.SIGINT)  # the daemon alone, not its process group
    orchestrator.daemon.wait(timeout=60)
    wait_for("the idle workers to leave after the daemon stopped", lambda: not orchestrator.workers(), EXIT_S)


def test_an_idle_worker_ignores_ctrl_c_and_leaves_quietly_on_eof() -> None:
    """Ctrl-C of `dagster dev` reaches the whole process group: an idle worker must not print a traceback, and
    leaves when its launcher's end of the pipe closes."""
    read_end, write_end = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, "-m", WORKER_MODULE, "--ready-fd", str(write_end)],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[write_end],
    )  # fmt: skip
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        assert ready.read() == b"ready"
    worker.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert worker.poll() is None  # still waiting for a run
    _, stderr = worker.communicate(timeout=30)  # closes stdin: EOF
    assert worker.returncode == 0 and stderr == b""


def test_a_terminate_before_the_worker_read_its_run_cancels_the_run_at_its_start(tmp_path: Path) -> None:
    """terminate() right after a launch can signal a worker that has not read its run yet (SIGINT noted, not
    raised): the run must still end CANCELED at its start, not run its steps."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    location = tmp_path / "launcher_location.py"
    shutil.copy(REPO / "tests/support/launcher_location.py", location)
    origin = JobPythonOrigin(
        "sleepy_job", RepositoryPythonOrigin(sys.executable, FileCodePointer(str(location), "defs", str(tmp_path)))
    )
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        run = create_run_for_test(instance, "sleepy_job", job_code_origin=origin, status=dg.DagsterRunStatus.STARTING)
        read_end, write_end = os.pipe()
        worker = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--origin", serialize_value(origin), "--ready-fd", str(write_end)],
            stdin=subprocess.PIPE, pass_fds=[write_end], cwd=tmp_path,
            env={**os.environ, "DAGSTER_HOME": str(home)}, start_new_session=True,
        )  # fmt: skip
        os.close(write_end)
        with os.fdopen(read_end, "rb") as ready:
            assert ready.read() == b"ready"
        worker.send_signal(signal.SIGINT)  # before it read its run
        time.sleep(0.2)
        instance.report_run_canceling(run)  # what terminate() does first
        args = ExecuteRunArgs(job_origin=origin, run_id=run.run_id, instance_ref=instance.get_ref())
        worker.communicate(serialize_value(args).encode() + b"\n", timeout=40)
        final = instance.get_run_by_id(run.run_id)
        assert final is not None and final.status == dg.DagsterRunStatus.CANCELED, final and final.status
        assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)


def test_an_edited_settings_file_makes_the_next_run_cold(tmp_path, monkeypatch):
    """The definitions read hsi.env when the worker imported them: an edit after that must not run stale."""
    from hsi_dagster.instance import worker as run_worker

    env_file = tmp_path / "hsi.env"
    env_file.write_text("PARALLEL=2\n")
    monkeypatch.setenv("HSI_ENV_FILE", str(env_file))
    loaded_at = time.time() + 1  # as if the worker pre-loaded after the file was written
    assert run_worker.changed_settings_files(loaded_at) == []
    os.utime(env_file, (loaded_at + 1, loaded_at + 1))  # edited after the pre-load
    assert run_worker.changed_settings_files(loaded_at) == [os.path.realpath(env_file)]


def test_the_preload_calls_the_code_location_warm_up():
    """hsi_dagster.definitions.warm_up() runs in a pre-started worker: the tokenizer is loaded before the run."""
    script = (
        "import sys\n"
        "from dagster._core.code_pointer import ModuleCodePointer\n"
        "from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin\n"
        "from dagster._serdes import serialize_value\n"
        "from hsi_dagster.instance import worker as run_worker\n"
        "from hsi_dagster.core.prompt import tokens\n"
        "pointer = ModuleCodePointer('hsi_dagster.definitions', 'defs', None)\n"
        "origin = JobPythonOrigin('batch_pipeline', RepositoryPythonOrigin(sys.executable, pointer))\n"
        "assert tokens._token_byte_lengths.cache_info().currsize == 0\n"
        "run_worker._preload(serialize_value(origin))\n"
        "print(tokens._token_byte_lengths.cache_info().currsize)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1"
