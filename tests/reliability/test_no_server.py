"""#15 item 1, no llama-server at all: `hsi process` and a sensor-launched run say so within seconds, naming the URL
and how to start a server; the batches stay pending and complete once a server answers (the REAL embedded server).

Before: a 300 s start-up wait per readiness check, times the step retries, times the batches (13+ minutes of
silence). Now connection refused for a few seconds means "nothing is starting there" (LlamaServerNotRunning), while
a server that answers 503 "Loading model" is still waited for (tests/reliability/test_server_faults.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.instance_home import project_env, project_home, run_hsi
from tests.support.ledger import ledger
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick, step_failure_message

pytestmark = [pytest.mark.llm, pytest.mark.slow]
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
FAIL_FAST_SECONDS = 30  # CLI start-up (Dagster import, ~5-10 s on 2 busy cores) + the 3 s refused wait


def _hsi_env(tmp_path: Path, db: str, url: str) -> dict[str, str]:
    settings = {"CTX_SIZE": "8192", "PARALLEL": "2", "NEMOTRON_MAX_OUTPUT_TOKENS": "256"}
    return project_env(project_home(tmp_path), db, LLAMA_SERVER_URL=url, PROMPT_SAFETY_MARGIN_TOKENS="256", **settings)


def test_hsi_process_without_a_server_says_so_within_seconds_and_the_batches_complete_later(llama_server, tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["porch"], 2, start=hours_ago(2)))  # 2 closed batches, 4 detections
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = _hsi_env(tmp_path, db, nowhere)

    started = time.monotonic()
    done = run_hsi("process", env=env, timeout=120)
    seconds = time.monotonic() - started
    assert done.returncode == 3, done.stdout + done.stderr
    assert seconds < FAIL_FAST_SECONDS, seconds
    assert f"no llama-server at {nowhere}" in done.stderr
    assert "hsi llm serve" in done.stderr and "ai-llm" in done.stderr
    assert "2 batches stay pending" in done.stderr
    print(f"\nhsi process without a server: exit {done.returncode} after {seconds:.1f} s")
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert instance.get_runs() == []  # no run launched, so no attempt spent: nothing waits out a back-off
    assert ledger(db).assessments == 0

    env["LLAMA_SERVER_URL"] = llama_server.url  # a server answers now
    done = run_hsi("process", env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 runs, 0 failed" in done.stdout
    after = ledger(db)
    after.assert_complete()
    assert (after.detections_in, after.batches, after.assessments) == (4, 2, 2)
    print(f"ledger: {after.row()}")


def test_a_sensor_launched_run_without_a_server_fails_at_once_naming_it_and_completes_later(llama_server, tmp_path):
    """The run the sensor requests, executed as the daemon would: the LLM step fails once (no step retries: a
    refused connection will not be fixed by a retry 5 s later), the batch stays unassessed, the next run of it
    completes."""
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["yard"], 1, start=hours_ago(2)))
    port = free_port()
    res = resources(db, f"http://127.0.0.1:{port}")
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        assert len(tick.run_requests) == 1
        batch_id = tick.run_requests[0].partition_key
        started = time.monotonic()
        failed = dg.materialize(
            PIPELINE,
            partition_key=batch_id,
            instance=instance,
            resources=res,
            tags=tick.run_requests[0].tags,
            raise_on_error=False,
        )
        seconds = time.monotonic() - started
        assert not failed.success
        assert seconds < 20, seconds  # was: 300 s start-up wait x 3 step attempts
        message = step_failure_message(failed)
        assert batch_id in message and f"no llama-server at http://127.0.0.1:{port}" in message
        assert "hsi llm serve" in message
        assert not any(e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY for e in failed.all_events)
        assert ledger(db).assessments == 0
        print(f"\nsensor-launched run without a server: failed after {seconds:.1f} s")

        good = resources(db, llama_server.url)
        assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=good).success
    after = ledger(db)
    after.assert_complete()
    assert (after.detections_in, after.batches, after.assessments) == (2, 1, 1)
