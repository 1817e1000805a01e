"""Launch each run in a process that already imported dagster and the definitions (issue #17, the live path).

Dagster's DefaultRunLauncher asks the code server to spawn a new interpreter per run: ~1.5 s of imports between
RUN_STARTING and RUN_START. This launcher keeps `warm_workers` pre-started `hsi_dagster.instance.worker` processes per
code origin (executable, working directory); a launch writes the `dagster api execute_run` payload to an idle
one's stdin and starts its replacement in the background. Without a ready worker the run starts cold, as
`dagster api execute_run <payload>` (what DockerRunLauncher runs in its container). One run per process, as before.
A worker that finds project files edited since its pre-load re-executes cold (hsi_dagster/instance/worker.py). Workers
run in their own session: a run outlives a daemon restart, as it did as a child of the code server. Termination
and run monitoring work from the `hsi/run_worker_pid` tag alone, so the webserver can use them too. Module import
stays light: the daemon imports it; the definitions load only in the workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus
from dagster._core.origin import JobPythonOrigin
from dagster._core.storage.dagster_run import DagsterRun
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

PID_TAG = "hsi/run_worker_pid"
WORKER_MODULE = "hsi_dagster.instance.worker"
_OUR_COMMANDS = (WORKER_MODULE.encode(), b"execute_run")  # what /proc/<pid>/cmdline of one of our workers holds

WorkerKey = tuple[str, str | None]


@dataclass
class _Worker:
    """A pre-started worker; `ready` once it finished its imports, `run` once a run was handed to it."""

    process: subprocess.Popen[bytes]
    ready: threading.Event = field(default_factory=threading.Event)
    run: ExecuteRunArgs | None = None


def worker_key(origin: JobPythonOrigin) -> WorkerKey:
    pointer = origin.repository_origin.code_pointer
    return origin.executable_path, getattr(pointer, "working_directory", None)


def _pid_is_our_worker(pid: int) -> bool:
    """Alive, not a zombie, and (where /proc tells) running one of our commands: a recycled pid is not ours."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return any(command in cmdline.read() for command in _OUR_COMMANDS)
    except OSError:
        return True  # no /proc: trust the signal probe


class WarmProcessRunLauncher(RunLauncher, ConfigurableClass):
    """Runs each run in a pre-imported local process (`warm_workers` per code origin; 0 = always cold)."""

    def __init__(self, warm_workers: int = 1, inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._warm_workers = max(0, warm_workers)
        self._lock = threading.Lock()
        self._idle: dict[WorkerKey, list[_Worker]] = {}
        self._disposed = False
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, dg.Field]:
        return {"warm_workers": dg.Field(dg.IntSource, is_required=False, default_value=1)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> Self:
        return cls(inst_data=inst_data, **config_value)

    # launching

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None:
            raise dg.DagsterInvariantViolationError(f"Run {run.run_id} has no job code origin to launch")
        args = ExecuteRunArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref(), set_exit_code_on_failure=False
        )
        key = worker_key(origin)
        worker = self._take_idle(key)
        if worker is not None:
            mode = "warm" if worker.ready.is_set() else "pre-started (still importing)"
            pid = worker.process.pid
            self._instance.add_run_tags(run.run_id, {PID_TAG: str(pid)})
            if not self._hand_over(worker, args):
                worker = None
        if worker is None:
            mode, pid = "cold", self._start_cold(args, key)
        self._instance.report_engine_event(
            f"Launched run in a {mode} worker process (pid: {pid}).", run, cls=self.__class__
        )
        if self._warm_workers:
            threading.Thread(target=self._top_up, args=(key, origin), name="hsi-warm-worker", daemon=True).start()

    def _start_cold(self, args: ExecuteRunArgs, key: WorkerKey) -> int:
        """`dagster api execute_run <payload>` in a new interpreter, reaped by a thread; tags the run with its pid."""
        # Not args.get_command_args(): code servers record the entry point as a bare `dagster`, found only on PATH.
        argv = [key[0], "-m", "dagster", "api", "execute_run", serialize_value(args)]
        process = self._start(argv, key, stdin=None)
        threading.Thread(target=process.wait, name="hsi-run-reaper", daemon=True).start()
        self._instance.add_run_tags(args.run_id, {PID_TAG: str(process.pid)})
        return process.pid

    def _take_idle(self, key: WorkerKey) -> _Worker | None:
        """The first live worker for `key`, ready ones first (a still-importing one beats a cold start)."""
        with self._lock:
            workers = [w for w in self._idle.get(key, []) if w.process.poll() is None]
            workers.sort(key=lambda w: not w.ready.is_set())
            chosen = workers.pop(0) if workers else None
            self._idle[key] = workers
            return chosen

    @staticmethod
    def _hand_over(worker: _Worker, args: ExecuteRunArgs) -> bool:
        stdin = worker.process.stdin
        assert stdin is not None
        try:
            worker.run = args
            stdin.write(serialize_value(args).encode() + b"\n")
            stdin.close()
        except OSError:  # it died between the poll and the write
            worker.run = None
            return False
        return True

    @staticmethod
    def _start(
        argv: Sequence[str], key: WorkerKey, stdin: int | None, pass_fds: Sequence[int] = ()
    ) -> subprocess.Popen[bytes]:
        # Own session: a run outlives a restart of the daemon (or a signal to its process group) as it did as a
        # child of the code server; an idle worker still leaves when the daemon's end of its stdin closes.
        return subprocess.Popen(
            list(argv),
            cwd=key[1] or None,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )

    def _top_up(self, key: WorkerKey, origin: JobPythonOrigin) -> None:
        with self._lock:
            if self._disposed:
                return
            idle = self._idle.setdefault(key, [])
            try:
                while len([w for w in idle if w.process.poll() is None]) < self._warm_workers:
                    idle.append(self._start_warm(key, origin))
            except OSError:  # no warm worker then: the next run starts cold, which reports its own error if any
                logging.getLogger(__name__).exception("could not pre-start a run worker for %s", key)

    def _start_warm(self, key: WorkerKey, origin: JobPythonOrigin) -> _Worker:
        read_end, write_end = os.pipe()
        argv = [key[0], "-m", WORKER_MODULE, "--origin", serialize_value(origin), "--ready-fd", str(write_end)]
        try:
            process = self._start(argv, key, stdin=subprocess.PIPE, pass_fds=[write_end])
        except OSError:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        worker = _Worker(process)
        threading.Thread(target=self._watch, args=(worker, read_end, key), name="hsi-run-worker", daemon=True).start()
        return worker

    def _watch(self, worker: _Worker, read_end: int, key: WorkerKey) -> None:
        """Marks the worker ready, reaps it (no zombies) and, should it die before reading a handed-over run
        (it never got ready), starts that run cold."""
        with os.fdopen(read_end, "rb") as ready:
            if ready.read() == b"ready":
                worker.ready.set()
        code = worker.process.wait()
        with self._lock:
            if worker in self._idle.get(key, []):
                self._idle[key].remove(worker)
        if worker.run is not None and not worker.ready.is_set():
            run = self._instance.get_run_by_id(worker.run.run_id)
            if run is not None and run.status == dg.DagsterRunStatus.CANCELING:  # terminate() hit it: done
                self._instance.report_run_canceled(run, f"Run worker {worker.process.pid} exited ({code}).")
                return
            pid = self._start_cold(worker.run, key)
            if run is not None:
                self._instance.report_engine_event(
                    f"Pre-started worker {worker.process.pid} exited ({code}) before reading its run; "
                    f"relaunched in a cold worker process (pid: {pid}).",
                    run,
                    cls=self.__class__,
                )

    # termination, monitoring, shutdown

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if not run or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        pid = _run_pid(run)
        if pid is None or not _pid_is_our_worker(pid):
            self._instance.report_engine_event(
                f"No live run worker to interrupt (pid tag: {pid}).", run, cls=self.__class__
            )
            return False
        os.kill(pid, signal.SIGINT)  # Dagster's run worker turns it into DagsterExecutionInterruptedError
        self._instance.report_engine_event(f"Sent SIGINT to run worker pid {pid}.", run, cls=self.__class__)
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = _run_pid(run)
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"Run has no {PID_TAG} tag")
        if _pid_is_our_worker(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(pid))
        return CheckRunHealthResult(WorkerStatus.FAILED, f"Run worker process {pid} is gone", run_worker_id=str(pid))

    def dispose(self) -> None:
        """Idle workers get EOF and exit; running runs are left to finish."""
        with self._lock:
            self._disposed = True
            idle = [w for workers in self._idle.values() for w in workers]
            self._idle.clear()
        for worker in idle:
            if worker.process.stdin is not None:
                with contextlib.suppress(OSError):
                    worker.process.stdin.close()


def _run_pid(run: DagsterRun) -> int | None:
    value = run.tags.get(PID_TAG)
    return int(value) if value and value.isdigit() else None
