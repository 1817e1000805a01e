"""`hsi process`: every batch closed as of T, through Dagster on the persistent instance (runs show in the UI).

Runs execute in PARALLEL worker PROCESSES, each running batches one after another in-process (`execute_in_process`
on the DAGSTER_HOME instance). Why not threads: Dagster's in-process execution is not thread-safe (logging set-up
deadlocks). Why not one process per run (the daemon's default launcher): 2-3 s of start-up per batch. Why not more
workers than slots: PARALLEL workers are what keeps this command to PARALLEL LLM calls (pools have run
granularity, see dagster.yaml: they gate the daemon's launches, not in-process steps). DuckDB writes are short
transactions that wait out each other's file lock.
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

from hsi_dagster.cli.instance import get_instance
from hsi_dagster.core.batching import BatchRules
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME, DUCKDB_WRITES_POOL, LLAMA_SLOTS_POOL
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.pipeline_tables import unassessed_batches

# Step events go to the event log (the UI); the console gets warnings and errors only.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
_worker_job = None
_worker_instance = None


@dataclass(frozen=True)
class BatchRun:
    batch_id: str
    success: bool
    run_id: str
    seconds: float
    error: str | None = None


@dataclass
class ProcessReport:
    batch_ids: list[str]
    runs: list[BatchRun] = field(default_factory=list)
    seconds: float = 0.0

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
    started = time.perf_counter()
    result = _worker_job.execute_in_process(
        run_config=QUIET, instance=_worker_instance, partition_key=batch_id, raise_on_error=False, tags=tags
    )
    error = None
    if not result.success:
        failures = [event.event_specific_data.error for event in result.all_events if event.is_step_failure]
        error = "; ".join(f"{err.message.strip()}" for err in failures if err) or "run failed"
    return BatchRun(batch_id, result.success, result.run_id, time.perf_counter() - started, error)


def batches_to_process(settings: HsiSettings, as_of: datetime) -> list[str]:
    """Closed windows not yet recorded, then recorded batches that still have no assessment (earlier failures)."""
    with connect(settings.HSI_DUCKDB_PATH) as conn:
        closed = [batch.batch_id for batch in pending_closed_batches(conn, BatchRules.from_settings(settings), as_of)]
        retry = [batch_id for batch_id in unassessed_batches(conn) if batch_id not in set(closed)]
    return closed + retry


SOURCE_TAG = {"hsi/source": "hsi process"}


class AlreadyRunning(RuntimeError):
    """Another `hsi process` holds the lock of this DAGSTER_HOME."""


def reclaim_orphans(instance) -> int:
    """Runs of an `hsi process` that was killed stay STARTED and keep their pool slots, which would block every
    later run. Called while holding the process lock, so no other `hsi process` is running: mark them failed and
    free their slots."""
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
    for pool in (LLAMA_SLOTS_POOL, DUCKDB_WRITES_POOL):
        for claim in storage.get_concurrency_info(pool).claimed_slots:
            run = instance.get_run_by_id(claim.run_id)
            if run is None or run.is_finished:
                storage.free_concurrency_slots_for_run(claim.run_id)
    return len(orphans)


def process(
    settings: HsiSettings,
    as_of: datetime,
    *,
    workers: int | None = None,
    on_result: Callable[[BatchRun], None] | None = None,
) -> ProcessReport:
    """Materialize the batch pipeline for every batch closed as of `as_of`. Failed batches stay pending."""
    started = time.perf_counter()
    instance = get_instance(settings)
    lock = open(f"{instance.root_directory}/hsi-process.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise AlreadyRunning(f"another `hsi process` is running on {instance.root_directory}") from None
    try:
        reclaim_orphans(instance)
        return _process_locked(instance, settings, as_of, started, workers, on_result)
    finally:
        lock.close()


def _process_locked(instance, settings, as_of, started, workers, on_result) -> ProcessReport:
    batch_ids = batches_to_process(settings, as_of)
    report = ProcessReport(batch_ids)
    if not batch_ids:
        return report
    existing = set(instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME))
    instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [key for key in batch_ids if key not in existing])
    workers = workers or min(len(batch_ids), settings.PARALLEL)
    tags = {**SOURCE_TAG, "hsi/as_of": as_of.isoformat()}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(_run_batch, batch_id, tags) for batch_id in batch_ids]
        for future in as_completed(futures):
            run = future.result()
            report.runs.append(run)
            if on_result:
                on_result(run)
    report.seconds = time.perf_counter() - started
    return report
