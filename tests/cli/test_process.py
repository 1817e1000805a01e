"""`hsi process`: the batch policy it shares with the sensor, with the attempt history read from a real Dagster
instance; the reclaim of a killed run's slots; and against the REAL embedded server: every closed batch assessed,
runs recorded where the UI reads them, and never more LLM requests in flight than the server has slots."""

import time
from datetime import UTC, datetime

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.cli.process import SOURCE_TAG, batches_to_process, reclaim_orphans
from hsi_dagster.core.intake.batch_policy import MAX_ATTEMPTS, RETRY_GRACE_SECONDS
from hsi_dagster.partitions import LLAMA_SLOTS_POOL
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.instance_home import project_env, project_home, run_hsi
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources
from tests.support.server_watch import ServerWatcher


def fail_run(instance: dg.DagsterInstance, batch_id: str, broken_db: str) -> None:
    """A real run of the batch that fails in its first step (the database path is a folder)."""
    result = dg.materialize(
        [detection_batches],
        partition_key=batch_id,
        instance=instance,
        resources={**resources(broken_db), "duckdb": HsiDuckDBResource(database=broken_db)},
        tags=SOURCE_TAG,
        raise_on_error=False,
    )
    assert not result.success


def test_process_follows_the_batch_policy_with_attempts_counted_from_the_instance(tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["a", "b"], 1, start=hours_ago(2)))
    settings = load_settings(HSI_DUCKDB_PATH=db)
    as_of = datetime.now(UTC)
    with dg.instance_for_test() as instance:
        first = batches_to_process(instance, settings, as_of, time.time())
        batch_ids = [r.batch_id for r in first.requests]
        assert len(batch_ids) == 2 and {r.attempt for r in first.requests} == {1}
        failing, other = batch_ids
        instance.add_dynamic_partitions("batches", [failing])
        fail_run(instance, failing, str(tmp_path))  # the window stays closed and unrecorded
        now = time.time()
        again = batches_to_process(instance, settings, as_of, now)
        assert [r.batch_id for r in again.requests] == [other]  # the failed one waits out its back-off
        assert failing in again.waiting and again.waiting[failing] > now
        later = batches_to_process(instance, settings, as_of, now + RETRY_GRACE_SECONDS + 1)
        assert [(r.batch_id, r.attempt) for r in later.requests] == [(failing, 2), (other, 1)]
        for _ in range(MAX_ATTEMPTS - 1):
            fail_run(instance, failing, str(tmp_path))
        given_up = batches_to_process(instance, settings, as_of, now + 10**6)
        assert given_up.abandoned == [failing] and [r.batch_id for r in given_up.requests] == [other]


def test_a_batch_whose_successful_run_left_no_assessment_is_processed_at_once(tmp_path):
    """A run of only detection_batches succeeded (or the assessment rows were deleted to assess it again): no
    failure to back off from, and the instance knows who recorded it, so it is requested now, as attempt 1."""
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["gate"], 1, start=hours_ago(2)))
    settings = load_settings(HSI_DUCKDB_PATH=db)
    with dg.instance_for_test() as instance:
        [request] = batches_to_process(instance, settings, datetime.now(UTC), time.time()).requests
        instance.add_dynamic_partitions("batches", [request.batch_id])
        recorded = dg.materialize(
            [detection_batches], partition_key=request.batch_id, instance=instance, resources=resources(db)
        )
        assert recorded.success
        [again] = batches_to_process(instance, settings, datetime.now(UTC), time.time()).requests
        assert (again.batch_id, again.attempt, again.run) == (request.batch_id, 1, 2)


def test_reclaim_marks_a_killed_process_runs_failed_and_frees_their_slots(tmp_path):
    """What a killed `hsi process` leaves behind, written straight into a real instance's storage: a STARTED run
    of ours holding an llama_slots slot. The next `hsi process` fails the run and frees the slot; a slot held by a
    run that is still going (not ours) stays."""
    with dg.instance_for_test() as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots(LLAMA_SLOTS_POOL, 2)
        ours = dg.DagsterRun(
            job_name="batch_pipeline", run_id="killed-run", status=dg.DagsterRunStatus.STARTED, tags=SOURCE_TAG
        )
        theirs = dg.DagsterRun(job_name="batch_pipeline", run_id="daemon-run", status=dg.DagsterRunStatus.STARTED)
        for run in (ours, theirs):
            instance.run_storage.add_run(run)
            storage.claim_concurrency_slot(LLAMA_SLOTS_POOL, run.run_id, "risk_assessments")
        assert reclaim_orphans(instance) == 1
        assert instance.get_run_by_id("killed-run").status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id("daemon-run").status == dg.DagsterRunStatus.STARTED
        claimed = {slot.run_id for slot in storage.get_concurrency_info(LLAMA_SLOTS_POOL).claimed_slots}
        assert claimed == {"daemon-run"}


@pytest.mark.slow
@pytest.mark.llm
def test_process_assesses_3x_parallel_batches_with_at_most_parallel_in_flight(llama_server, tmp_path):
    parallel = llama_server.settings.PARALLEL
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["a", "b", "c"], parallel, start=hours_ago(2)))  # 3 x PARALLEL windows
    home = project_home(tmp_path)
    env = project_env(
        home,
        db,
        LLAMA_SERVER_URL=llama_server.url,
        CTX_SIZE="8192",
        PARALLEL=str(parallel),
        NEMOTRON_MAX_OUTPUT_TOKENS="256",
        PROMPT_SAFETY_MARGIN_TOKENS="256",
    )
    with ServerWatcher(llama_server.url) as watcher:
        done = run_hsi("process", env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert watcher.polls > 10
    assert watcher.max_processing <= parallel and watcher.max_deferred == 0
    with duckdb.connect(db, read_only=True) as conn:
        assessed = conn.execute("SELECT count(*), count(DISTINCT batch_id) FROM risk_assessments").fetchone()
    assert assessed == (3 * parallel, 3 * parallel)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="batch_pipeline", tags={"hsi/source": "hsi process"}))
        assert len(runs) == 3 * parallel
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    # Nothing left: a second call finds no closed batch to process.
    again = run_hsi("process", env=env)
    assert again.returncode == 0 and "0 runs" in again.stdout
