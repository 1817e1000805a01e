"""#15 item 10 on the real pipeline (embedded llama.cpp server, whose /props reports 4096 tokens per slot: CTX_SIZE
8192, PARALLEL 2; a real Dagster instance; a DuckDB file). The batch of the issue, 6 persons at night in the garage
with rich Florence regions, with the default output reserve (1536) and margin (256): budget 2304 served tokens,
1888 cl100k. It failed `budgeted_prompts` with PromptTooLarge; now its prompt degrades and it is assessed. With a
margin that leaves less than the prompt's floor, the batch is stored as prompt_too_large, not retried or requested
again, and the run-failure sensor alerts like an unassessed fast-path batch."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.core.prompt.budget import FLORENCE_LINES
from hsi_dagster.core.prompt.messages import STATIC_SYSTEM_PROMPT
from hsi_dagster.resources import PipelineSettingsResource
from hsi_dagster.sensors import batch_window_sensor, unassessed_fast_path_sensor
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import (
    hours_ago,
    materialize_request,
    resources,
    run_failure_context,
    sensor_tick,
)
from tests.support.rich_batches import detection_records

pytestmark = pytest.mark.llm
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]


def garage_night(db: str) -> None:
    records = detection_records(n_detections=6, n_regions=64)
    for record in records:  # recent, so the sensor sees the window as closed and within retention
        record["ts"] = record["ts"].replace("2026-12-02T02:", hours_ago(2).strftime("%Y-%m-%dT%H:"))
    report = ingest_lines(db, [json.dumps(r) for r in records])
    assert (report.loaded, report.quarantined) == (6, 0)


def garage_night_with_margin(tmp_path: Path, url: str, margin: int) -> tuple[str, dict]:
    """The night of the issue in a fresh database, and the test resources with the issue's output reserve (1536)
    and the given safety margin (CTX_SIZE=8192, PARALLEL=2)."""
    db = str(tmp_path / "hsi.duckdb")
    garage_night(db)
    settings = load_settings(
        os.devnull,
        CTX_SIZE=8192,
        PARALLEL=2,
        HSI_INBOX_DIR=str(tmp_path / "inbox"),
        NEMOTRON_MAX_OUTPUT_TOKENS=1536,
        PROMPT_SAFETY_MARGIN_TOKENS=margin,
    )
    return db, {**resources(db, url), "pipeline_settings": PipelineSettingsResource.from_settings(settings)}


def test_the_batch_of_the_issue_is_assessed(llama_server, tmp_path: Path) -> None:
    started = time.monotonic()
    db, res = garage_night_with_margin(tmp_path, llama_server.url, margin=256)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        assert len(tick.run_requests) == 1
        (request,) = tick.run_requests
        result = materialize_request(PIPELINE, request, instance, res)
        assert result.success
        prompt_metadata = result.asset_materializations_for_node("budgeted_prompts")[0].metadata
        assert prompt_metadata["budget_source"].value == "server /props per-slot n_ctx"
        assert (
            prompt_metadata["context_budget"].value == 2304 and prompt_metadata["estimate_budget_cl100k"].value == 1888
        )
        assert prompt_metadata["prompt_degraded"].value == FLORENCE_LINES
        checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
        assert checks["prompt_fits_budget"] and checks["prompt_within_budget"]  # re-encoded, and as the server counted
    with duckdb.connect(db, read_only=True) as conn:
        messages, degraded = conn.execute("SELECT messages, prompt_degraded FROM budgeted_prompts").fetchone()  # type: ignore[misc]
        status, prompt_tokens, budget = conn.execute(
            "SELECT status, prompt_tokens, context_budget FROM risk_assessments"
        ).fetchone()  # type: ignore[misc]
    assert degraded == [FLORENCE_LINES]
    assert json.loads(messages)[0]["content"] == STATIC_SYSTEM_PROMPT  # the cached prefix is kept
    assert status in ("ok", "invalid_output") and prompt_tokens <= budget == 2304
    took = time.monotonic() - started
    print(f"\nROW-10 assessed: status {status}, {prompt_tokens} of {budget} prompt tokens, {took:.1f} s")


def test_a_batch_whose_floor_cannot_fit_alerts_unassessed(llama_server, tmp_path: Path) -> None:
    # 4096 - 1536 - 1300 = 1260 served tokens = 1032 cl100k: under the batch's floor (1122)
    db, res = garage_night_with_margin(tmp_path, llama_server.url, margin=1300)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        (request,) = tick.run_requests
        failed = materialize_request(PIPELINE, request, instance, res, raise_on_error=False)
        assert not failed.success
        unassessed_fast_path_sensor(run_failure_context(failed, instance, res))
        again = sensor_tick(batch_window_sensor, instance, res, tick.cursor)
        assert not again.run_requests  # recorded as prompt_too_large: not requested again and again
    with duckdb.connect(db, read_only=True) as conn:
        status, error = conn.execute("SELECT status, error FROM risk_assessments").fetchone()  # type: ignore[misc]
        alerts = conn.execute("SELECT alert_id, kind, summary FROM alerts").fetchall()
    assert status == "prompt_too_large" and "even at its floor" in error and "> budget 1032" in error
    assert [(a, k) for a, k, _ in alerts] == [(f"{request.partition_key}:unassessed", "prompt_too_large")]
    assert "does not fit one llama-server slot" in alerts[0][2]
