"""#15 item 2: llama-server faults. Runs fail clearly (the error names the endpoint), nothing is stored for the batch,
and once the fault is over the batch completes exactly once.

- Killed and restarted in the middle of a backlog: the REAL embedded llama.cpp server.
- Slower than the read timeout, 503 "Loading model", a reply that is not JSON, model output that is not JSON: a
  FAKE server (tests/support/fake_llama.py) injects these faults; it runs no model and proves nothing about
  llama.cpp itself.

Every test ends with the ledger (tests/support/ledger.py): every detection in exactly one assessed batch, none lost,
no duplicate rows. Failing runs here go through the LLM step's retry policy (3 attempts, 5 s then 10 s apart).
"""

from __future__ import annotations

import re
import time

import dagster as dg
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.llm.client import reset_server_cache
from hsi_dagster.resources import LlamaServerResource
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.fake_llama import LOADING, FakeLlama, Reply
from tests.support.ledger import ledger
from tests.support.llm_fixtures import SERVER_SETTINGS, start_embedded
from tests.support.pipeline_helpers import closed_windows, hours_ago, resources, sensor_tick, step_failure_message

PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
CHAT = "/v1/chat/completions"


def _assessments(db: str, batch_id: str) -> int:
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM risk_assessments WHERE batch_id = ?", [batch_id]).fetchone()[0]


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def _backlog(tmp_path, batches: int, instance: dg.DagsterInstance) -> tuple[str, list[str]]:
    """`batches` closed batches of one camera, ingested, and registered as partitions by a sensor tick."""
    db = str(tmp_path / "hsi.duckdb")
    ingest_lines(db, closed_windows(["driveway"], batches, start=hours_ago(2)))
    tick = sensor_tick(batch_window_sensor, instance, resources(db), None)
    return db, sorted(r.partition_key for r in tick.run_requests)


def _fake_llm(fake: FakeLlama, **overrides: float) -> LlamaServerResource:
    options = {"read_timeout_seconds": 120.0, "startup_timeout_seconds": 5.0, **overrides}
    return LlamaServerResource(urls=[fake.url], max_output_tokens=256, **options)


@pytest.mark.slow
@pytest.mark.llm
def test_server_killed_mid_backlog_fails_clearly_and_a_restarted_server_completes_it(tmp_path, instance):
    """Batch 1 is assessed; the server dies; batch 2 (its prep steps run) fails naming the endpoint, nothing stored;
    the server comes back on the same port and batches 2 and 3 complete, each with exactly one row."""
    db, batch_ids = _backlog(tmp_path, 3, instance)
    server = start_embedded(tmp_path, SERVER_SETTINGS)
    port = server.port
    res = resources(db, server.url)
    try:
        assert dg.materialize(PIPELINE, partition_key=batch_ids[0], instance=instance, resources=res).success
        server.stop()
        failed = dg.materialize(
            PIPELINE, partition_key=batch_ids[1], instance=instance, resources=res, raise_on_error=False
        )
        assert not failed.success
        message = step_failure_message(failed)
        # the endpoint that failed: the readiness probe's (refused: nothing listens any more) or the completion's
        assert batch_ids[1] in message and re.search(rf"(GET|POST) http://127\.0\.0\.1:{port}/", message), message
        assert _assessments(db, batch_ids[1]) == 0
        server = start_embedded(tmp_path, SERVER_SETTINGS, port=port)
        reset_server_cache()  # a new process would start with an empty cache; this one must re-probe
        for batch_id in batch_ids[1:]:
            assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    finally:
        server.stop()
    after = ledger(db)
    after.assert_complete()
    assert (after.detections_in, after.batches, after.assessments) == (6, 3, 3)
    print(f"\nkilled mid-backlog: {after.row()}")


@pytest.mark.slow
def test_a_server_slower_than_the_read_timeout_fails_naming_it_then_completes(fake_llama, tmp_path, instance):
    db, (batch_id,) = _backlog(tmp_path, 1, instance)
    # the schema probe answers; then every try of every attempt takes longer than the 0.5 s read timeout
    fake_llama.script(CHAT, Reply(), *[Reply(delay=1.5)] * 9)
    res = {**resources(db), "llm": _fake_llm(fake_llama, read_timeout_seconds=0.5)}
    started = time.monotonic()
    failed = dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res, raise_on_error=False)
    seconds = time.monotonic() - started
    assert not failed.success
    message = step_failure_message(failed)
    assert f"POST {fake_llama.url}/v1/chat/completions failed after 3 tries: timed out" in message
    assert _assessments(db, batch_id) == 0
    fake_llama.clear(CHAT)  # the server is fast again
    assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    ledger(db).assert_complete()
    assert _assessments(db, batch_id) == 1
    print(f"\nslower than the read timeout: the failing run took {seconds:.1f} s")


@pytest.mark.slow
def test_503_while_loading_is_waited_for_and_past_the_startup_timeout_fails_naming_it(fake_llama, tmp_path, instance):
    db, batch_ids = _backlog(tmp_path, 2, instance)
    res = {**resources(db), "llm": _fake_llm(fake_llama, startup_timeout_seconds=1.0)}
    # loading for longer than the start-up timeout, on every attempt: the run fails naming /health and the 503
    fake_llama.script("/health", *[Reply(503, LOADING)] * 1000)
    failed = dg.materialize(
        PIPELINE, partition_key=batch_ids[0], instance=instance, resources=res, raise_on_error=False
    )
    assert not failed.success
    message = step_failure_message(failed)
    assert f"llama-server at {fake_llama.url} was not ready within 1 s" in message
    assert f"GET {fake_llama.url}/health: HTTP 503" in message and "Loading model" in message
    assert fake_llama.count(CHAT) == 0 and _assessments(db, batch_ids[0]) == 0
    # loading for a moment (a few 503s inside the start-up timeout): waited for, the run succeeds
    fake_llama.clear("/health")
    fake_llama.loading_then_ready(2)
    health_before = fake_llama.count("/health")
    reset_server_cache()
    res = {**resources(db), "llm": _fake_llm(fake_llama, startup_timeout_seconds=30.0)}
    for batch_id in batch_ids:
        assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    assert fake_llama.count("/health") - health_before >= 3  # two 503s, then 200
    after = ledger(db)
    after.assert_complete()
    assert after.assessments == 2


@pytest.mark.slow
def test_a_reply_that_is_not_json_fails_naming_the_endpoint_then_completes(fake_llama, tmp_path, instance):
    db, (batch_id,) = _backlog(tmp_path, 1, instance)
    page = b"<html><body>502 Bad Gateway</body></html>"
    fake_llama.script(CHAT, Reply(), *[Reply(200, raw=page)] * 3)  # a proxy's page, on each of the 3 attempts
    res = {**resources(db), "llm": _fake_llm(fake_llama)}
    failed = dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res, raise_on_error=False)
    assert not failed.success
    message = step_failure_message(failed)
    assert f"POST {fake_llama.url}/v1/chat/completions sent a stream event that is not JSON" in message
    assert "502 Bad Gateway" in message
    assert _assessments(db, batch_id) == 0
    assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    ledger(db).assert_complete()
    assert _assessments(db, batch_id) == 1


def test_model_output_that_is_not_json_is_stored_as_invalid_and_a_rerun_replaces_it(fake_llama, tmp_path, instance):
    """Not a transport fault: the server answers, but the model's text is not JSON, also after the one repair
    attempt. The batch is assessed with status invalid_output (not lost, not retried forever); re-running it once
    the server behaves replaces the row: still one per batch."""
    db, (batch_id,) = _backlog(tmp_path, 1, instance)
    garbage = {
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{risk: high"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    fake_llama.script(CHAT, Reply(), Reply(200, garbage), Reply(200, garbage))
    res = {**resources(db), "llm": _fake_llm(fake_llama)}
    assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT status FROM risk_assessments").fetchall() == [("invalid_output",)]
    assert dg.materialize(PIPELINE, partition_key=batch_id, instance=instance, resources=res).success
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT status FROM risk_assessments").fetchall() == [("ok",)]
    ledger(db).assert_complete()
