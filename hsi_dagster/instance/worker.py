"""A run process started BEFORE its run: `WarmProcessRunLauncher` keeps one per code origin.

`python -m hsi_dagster.instance.worker --origin <JobPythonOrigin JSON> --ready-fd N` imports dagster and loads the code
location (what costs ~1.5 s in a fresh interpreter), closes the ready pipe, then waits on stdin for one line: the
`ExecuteRunArgs` JSON that `dagster api execute_run` takes. It runs that command in-process (one run per process,
then exit) or, if project code or the settings file changed on disk since the pre-load, `execv`s a fresh
`dagster api execute_run` so a developer's edit is never run stale. EOF on stdin (the launcher disposed or its
process died): exit 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import sysconfig
import time


def _installed_roots() -> tuple[str, ...]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values()}
    return tuple(os.path.realpath(p) + os.sep for p in paths if p)


def changed_project_files(since: float) -> list[str]:
    """Files of imported modules outside the installed locations (project code, editable installs) newer than
    `since`: the code this process holds in memory is older than the code on disk."""
    roots = _installed_roots()
    changed = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or path.startswith(roots):  # the cheap test first: most modules are installed ones
            continue
        real = os.path.realpath(path)
        if real.startswith(roots):
            continue
        try:
            if os.stat(real).st_mtime > since:
                changed.append(real)
        except OSError:
            continue
    return changed


def changed_settings_files(since: float) -> list[str]:
    """The settings file (hsi.env) if it changed since `since`: the definitions read it when they were imported,
    so a run in this process would use the old settings."""
    if "hsi_dagster.settings" not in sys.modules:
        return []
    from hsi_dagster.settings import default_env_file

    path = default_env_file()
    try:
        return [os.path.realpath(path)] if os.stat(path).st_mtime > since else []
    except OSError:
        return []


def _preload(origin_json: str | None) -> None:
    """Import what `dagster api execute_run` imports and, given an origin, the job's definitions."""
    import dagster._cli.api  # noqa: F401
    import dagster._core.storage.event_log.sqlite  # noqa: F401
    import dagster._core.storage.runs.sqlite  # noqa: F401

    if origin_json:
        from dagster._core.origin import JobPythonOrigin
        from dagster._serdes import deserialize_value
        from dagster._utils.hosted_user_process import recon_job_from_origin

        origin = deserialize_value(origin_json, JobPythonOrigin)
        recon_job_from_origin(origin).get_definition()
        # A code location module may define warm_up(): what its runs would otherwise load at their start.
        module = sys.modules.get(getattr(origin.repository_origin.code_pointer, "module", "") or "")
        warm_up = getattr(module, "warm_up", None)
        if callable(warm_up):
            warm_up()


_interrupted = False


def _note_interrupt(_signo: int, _frame: object) -> None:
    global _interrupted
    _interrupted = True


def _canceled_before_start(payload: str) -> bool:
    """terminate() signalled this worker before it read its run: finish the cancellation Dagster asked for (its
    run body would mark a run found CANCELING at its start as failed)."""
    from dagster._core.instance import DagsterInstance
    from dagster._core.storage.dagster_run import DagsterRunStatus
    from dagster._grpc.types import ExecuteRunArgs
    from dagster._serdes import deserialize_value

    args = deserialize_value(payload, ExecuteRunArgs)
    with DagsterInstance.from_ref(args.instance_ref) as instance:  # type: ignore[arg-type]
        run = instance.get_run_by_id(args.run_id)
        if run is None or run.status != DagsterRunStatus.CANCELING:
            return False
        instance.report_run_canceled(run, f"Run worker {os.getpid()} was interrupted before the run started.")
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hsi_dagster.instance.worker")
    parser.add_argument("--origin", help="serialized JobPythonOrigin to pre-load")
    parser.add_argument("--ready-fd", type=int, help="pipe to close once pre-loaded")
    args = parser.parse_args(argv)
    # Idle, a Ctrl-C of the process group (dagster dev stopping) must not print a traceback: the worker leaves on
    # EOF when its launcher's process exits. A SIGINT that came before the run was read (terminate() right after
    # the launch) cancels the run before it starts.
    signal.signal(signal.SIGINT, _note_interrupt)
    loaded_at = time.time()
    try:
        _preload(args.origin)
    except Exception as error:  # the run itself will report the failure, from a fresh interpreter
        print(f"hsi run_worker: pre-load failed ({error!r}); the run will start cold", file=sys.stderr, flush=True)
        loaded_at = 0.0
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"ready")
        os.close(args.ready_fd)
    payload = sys.stdin.readline().strip()
    if not payload:
        return 0
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # as a cold run's stdin; also marks the worker busy in /proc
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stale = changed_project_files(loaded_at) + changed_settings_files(loaded_at) if loaded_at else ["(pre-load failed)"]
    if stale:
        note = f"hsi run_worker (pid {os.getpid()}): code changed since pre-load ({stale[0]}); running cold"
        print(note, file=sys.stderr, flush=True)
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "dagster", "api", "execute_run", payload])
    if _interrupted and _canceled_before_start(payload):
        return 0
    from dagster._cli.api import execute_run_command

    execute_run_command.main(args=[payload], prog_name="dagster api execute_run", standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
