"""A tiny code location for the run launcher tests and bench: a quick job, and one that runs until interrupted."""

import time

import dagster as dg


@dg.op
def quick() -> int:
    return 1


@dg.op
def sleepy() -> None:
    """Sleeps up to a minute in short naps: a run to terminate."""
    for _ in range(600):
        time.sleep(0.1)


@dg.job(executor_def=dg.in_process_executor)
def quick_job() -> None:
    quick()


@dg.job(executor_def=dg.in_process_executor)
def sleepy_job() -> None:
    sleepy()


defs = dg.Definitions(jobs=[quick_job, sleepy_job])
