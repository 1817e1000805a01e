"""The runs of each batch's partition in the instance, whoever launched them (the sensors, `hsi process`, the UI):
the history that the batch policy (core/intake/batch_policy.py) counts attempts and back-off from."""

from collections.abc import Sequence

import dagster as dg

from hsi_dagster.core.intake.batch_policy import BatchHistory, PastRun, history_from_runs

PARTITION_TAG = "dagster/partition"
HISTORY_QUERY_KEYS = 500  # partition keys per run-storage query


def batch_run_history(instance: dg.DagsterInstance, batch_ids: Sequence[str]) -> dict[str, BatchHistory]:
    """Attempts per batch from the instance's runs of its partition, whoever launched them (this sensor,
    `hsi process`, the UI): the history that the batch policy (core/intake/batch_policy.py) is applied to."""
    runs = []
    for start in range(0, len(batch_ids), HISTORY_QUERY_KEYS):
        keys = list(batch_ids[start : start + HISTORY_QUERY_KEYS])
        for record in instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: keys})):
            run = record.dagster_run
            ended = (record.end_time or record.update_timestamp.timestamp()) if run.is_finished else None
            succeeded = run.status == dg.DagsterRunStatus.SUCCESS
            runs.append(PastRun(run.tags[PARTITION_TAG], record.create_timestamp.timestamp(), ended, succeeded))
    return history_from_runs(runs)
