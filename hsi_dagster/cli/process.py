"""`hsi process`: every batch closed as of T, through Dagster on the persistent instance (runs show in the UI).

Runs execute in PARALLEL worker PROCESSES, each running batches one after another in-process (`execute_in_process`
on the DAGSTER_HOME instance). Why not threads: Dagster's in-process execution is not thread-safe (logging set-up
deadlocks). Why not one process per run (the daemon's default launcher): 2-3 s of start-up per batch. Why not more
workers than slots: PARALLEL workers are what keeps this command to PARALLEL LLM calls (pools have run
granularity, see dagster.yaml: they gate the daemon's launches, not in-process steps). DuckDB writes are short
transactions, queued by the file lock of storage/db.py.

Which batches, and when to try again: the batch-window sensor's policy (`core/batch_policy.choose_batches`), with
no per-tick cap. Attempt state lives in the Dagster instance: every run of a batch's partition that failed since
its last successful one is an attempt, whoever launched it (this command, the sensor, the UI), read back with
`instance/run_history.batch_run_history`; each run is tagged `hsi/attempt`. So a batch that failed here waits out
the same back-off before the next `hsi process` (or the sensor) tries it again, a batch with a run queued or going
elsewhere is left to it, and one that used MAX_ATTEMPTS is given up by both. Runs of a killed `hsi process` are
marked failed by the next one (`reclaim_orphans`) and so count as attempts too.

No llama-server: before launching any run, `check_llm_answers` asks the server(s) once. Connection refused for a few
seconds (nothing listens, nothing is starting) stops here with one message naming the URL and how to start a
server, and no run is launched, so no attempt is spent and every batch stays pending for the next call. A server
that answers 503 while loading its model is waited for, up to LLM_STARTUP_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from hsi_dagster.cli.instance import get_instance
from hsi_dagster.core.intake.batch_policy import BatchChoice, Request, candidates_in_order, choose_batches
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import unassessed_batches

if TYPE_CHECKING:
    import dagster as dg

# Step events go to the event log (the UI); the console gets warnings and errors only.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
_worker_job: dg.JobDefinition | None = None
_worker_instance: dg.DagsterInstance | None = None


@dataclass(frozen=True)
class BatchRun:
    batch_id: str
    success: bool
    run_id: str
    seconds: float
    error: str | None = None


@dataclass
class ProcessReport:
    batch_ids: list[str]  # the batches run by this call
    runs: list[BatchRun] = field(default_factory=list)
    seconds: float = 0.0
    waiting: dict[str, float] = field(default_factory=dict)  # batch_id -> epoch seconds of its next attempt
    running_elsewhere: list[str] = field(default_factory=list)  # a run of it is queued or going (daemon, UI)
    abandoned: list[str] = field(default_factory=list)  # MAX_ATTEMPTS runs and no assessment: not tried again

    @property
    def failed(self) -> list[BatchRun]:
        return [run for run in self.runs if not run.success]


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose `hsi process` died must not keep running batches (and holding pool slots) on its own."""
    import os
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="hsi-parent-watch").start()


def _init_worker(parent_pid: int) -> None:
    global _worker_job, _worker_instance
    import dagster as dg

    _exit_with_parent(parent_pid)

    from hsi_dagster.definitions import defs

    _worker_job = defs.resolve_job_def("batch_pipeline")
    _worker_instance = dg.DagsterInstance.get()


def _run_batch(batch_id: str, tags: dict[str, str]) -> BatchRun:
    assert _worker_job is not None, "worker not initialised (_init_worker)"
    started = time.perf_counter()
    result = _worker_job.execute_in_process(
        run_config=QUIET, instance=_worker_instance, partition_key=batch_id, raise_on_error=False, tags=tags
    )
    error = None
    if not result.success:
        failures = [event.step_failure_data.error for event in result.all_events if event.is_step_failure]
        error = "; ".join(f"{err.message.strip()}" for err in failures if err) or "run failed"
    return BatchRun(batch_id, result.success, result.run_id, time.perf_counter() - started, error)


def batches_to_process(instance, settings: HsiSettings, as_of: datetime, now: float) -> BatchChoice:
    """The batch policy over the windows closed as of `as_of` and the recorded batches without an assessment,
    with the instance's runs as the attempt history."""
    from hsi_dagster.instance.run_history import batch_run_history

    with connect(settings.HSI_DUCKDB_PATH) as conn:
        closed = [batch.batch_id for batch in pending_closed_batches(conn, BatchRules.from_settings(settings), as_of)]
        unassessed = unassessed_batches(conn)
    candidates = candidates_in_order(closed, unassessed)
    history = batch_run_history(instance, [candidate.batch_id for candidate in candidates])
    return choose_batches(candidates, history, now)


SOURCE_TAG = {"hsi/source": "hsi process"}
REFUSED_SECONDS = 3.0  # connection refused this long: no server is starting at the URL


class NoLlamaServer(RuntimeError):
    """No llama-server answers at LLAMA_SERVER_URL: no run was launched, the batches stay pending."""


def check_llm_answers(settings: HsiSettings, pending: int) -> None:
    """Return once one server of LLAMA_SERVER_URL is ready (waiting while it loads); raise NoLlamaServer when none
    is: refused for REFUSED_SECONDS, not ready within LLM_STARTUP_TIMEOUT_SECONDS, or refusing the request."""
    from hsi_dagster.llm.client import LlamaClient, LlamaServerError

    problems = []
    for url in settings.llm_urls:
        with LlamaClient(
            url,
            api_key=settings.api_key,
            startup_timeout=settings.LLM_STARTUP_TIMEOUT_SECONDS,
            refused_timeout=REFUSED_SECONDS,
        ) as client:
            try:
                client.wait_until_ready()
                return
            except LlamaServerError as exc:
                problems.append(str(exc))
    raise NoLlamaServer(
        "; ".join(problems) + f". No run was launched: {pending} batches stay pending; run `hsi process` again once "
        "the server answers"
    )


class AlreadyRunning(RuntimeError):
    """Another `hsi process` holds the lock of this DAGSTER_HOME."""


def reclaim_orphans(instance) -> int:
    """Runs of an `hsi process` that was killed stay STARTED and keep their pool slots, which would block every
    later run. Called while holding the process lock, so no other `hsi process` is running: mark them failed and
    free the slots of every finished run.

    Runs are found and failed through the instance's public methods. Dagster 1.13.27 has no public instance method
    for pool slots: the event log storage's `get_concurrency_run_ids` / `free_concurrency_slots_for_run` are what
    its own daemon uses for the same job (dagster/_daemon/monitoring/concurrency.py).
    """
    import dagster as dg

    orphans = instance.get_runs(
        filters=dg.RunsFilter(
            tags=SOURCE_TAG,
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
        )
    )
    for run in orphans:
        instance.report_run_failed(run, message="hsi process ended before this run finished")
    storage = instance.event_log_storage
    holders = storage.get_concurrency_run_ids()  # runs holding or waiting for a slot of any pool
    if holders:
        records = instance.get_run_records(filters=dg.RunsFilter(run_ids=sorted(holders)))
        unfinished = {record.dagster_run.run_id for record in records if not record.dagster_run.is_finished}
        for run_id in holders - unfinished:  # finished or deleted: nothing else frees their slots
            storage.free_concurrency_slots_for_run(run_id)
    return len(orphans)


def process(
    settings: HsiSettings,
    as_of: datetime,
    *,
    workers: int | None = None,
    on_result: Callable[[BatchRun], None] | None = None,
) -> ProcessReport:
    """Materialize the batch pipeline for the batches the batch policy chooses now (windows closed as of `as_of`,
    failed batches whose back-off is over)."""
    started = time.perf_counter()
    instance = get_instance(settings)
    with open(f"{instance.root_directory}/hsi-process.lock", "w") as lock:  # closing it releases the lock
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(f"another `hsi process` is running on {instance.root_directory}") from None
        reclaim_orphans(instance)
        return _process_locked(instance, settings, as_of, started, workers, on_result)


def _process_locked(instance, settings, as_of, started, workers, on_result) -> ProcessReport:
    choice = batches_to_process(instance, settings, as_of, time.time())
    batch_ids = [request.batch_id for request in choice.requests]
    report = ProcessReport(
        batch_ids, waiting=choice.waiting, running_elsewhere=choice.running, abandoned=choice.abandoned
    )
    if not batch_ids:
        report.seconds = time.perf_counter() - started
        return report
    check_llm_answers(settings, len(batch_ids))
    existing = set(instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME))
    instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [key for key in batch_ids if key not in existing])
    workers = workers or min(len(batch_ids), settings.PARALLEL)
    base_tags = {**SOURCE_TAG, "hsi/as_of": as_of.isoformat()}

    def tags(request: Request) -> dict[str, str]:
        return {**base_tags, "hsi/attempt": str(request.attempt)}

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(_run_batch, request.batch_id, tags(request)) for request in choice.requests]
        for future in as_completed(futures):
            run = future.result()
            report.runs.append(run)
            if on_result:
                on_result(run)
    report.seconds = time.perf_counter() - started
    return report
