"""correct_verdict_job on a real ephemeral Dagster instance: the run stores the correction once, keeps it in the
run history with its config, and a refused one fails the run with the reason naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from hsi_dagster.jobs import correct_verdict_job
from hsi_dagster.storage.corrections import corrections, refusal_counts
from hsi_dagster.storage.db import connect
from tests.support.pipeline_helpers import resources
from tests.support.verdicts import save_verdict


def run(instance: dg.DagsterInstance, db: Path, **config: object) -> dg.ExecuteInProcessResult:
    return correct_verdict_job.execute_in_process(
        run_config={"ops": {"store_correction": {"config": config}}},
        instance=instance,
        resources=resources(str(db)),
        raise_on_error=False,
    )


def test_a_run_stores_the_correction_once_and_shows_in_the_run_history(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "yard-1", "yard", 70, datetime.now(UTC) - timedelta(minutes=1))  # high
    with dg.DagsterInstance.ephemeral() as instance:
        first = run(instance, db, batch_id="yard-1", level="low", note="the neighbour's car")
        again = run(instance, db, batch_id="yard-1", level="low", note="the neighbour's car")  # a retry
        assert first.success and again.success
        assert first.output_for_node("store_correction") == "lower"
        history = instance.get_runs(filters=dg.RunsFilter(job_name="correct_verdict_job"))
        assert len(history) == 2
        assert history[0].run_config["ops"]["store_correction"]["config"]["batch_id"] == "yard-1"
    with connect(db, read_only=True) as conn:
        (row,) = corrections(conn)
    assert (row["batch_id"], row["verdict_level"], row["level"], row["source"], row["note"]) == (
        "yard-1",
        "high",
        "low",
        "dagster",
        "the neighbour's car",
    )


def test_a_refused_correction_fails_the_run_naming_the_field(tmp_path: Path) -> None:
    db = tmp_path / "hsi.duckdb"
    save_verdict(db, "yard-1", "yard", 70, datetime.now(UTC))
    with dg.DagsterInstance.ephemeral() as instance:
        for config, reason in (
            ({"batch_id": "yard-1", "level": "severe"}, "level: 'severe' is not one of"),
            ({"batch_id": "nope", "level": "low"}, "batch_id: unknown batch 'nope'"),
        ):
            result = run(instance, db, **config)
            assert not result.success
            failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
            assert reason in str(failure.step_failure_data.error.message) or reason in str(
                failure.step_failure_data.user_failure_data.description
            )
    with connect(db, read_only=True) as conn:
        assert corrections(conn) == []
        assert {(r["source"], r["field"]) for r in refusal_counts(conn)} == {
            ("dagster", "level"),
            ("dagster", "batch_id"),
        }
