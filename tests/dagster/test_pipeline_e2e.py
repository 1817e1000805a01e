"""End to end on the REAL embedded llama.cpp server: ingest -> sensor tick -> runs -> assessments in DuckDB."""

from datetime import timedelta

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.storage.shipped_trust import shipped_trust
from tests.support.contract import CONTRACT_COLUMNS as CONTRACT_TABLES
from tests.support.pipeline_helpers import closed_windows, detection, hours_ago, resources, sensor_tick

pytestmark = pytest.mark.llm
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]
ASSESSMENT_COLUMNS = CONTRACT_TABLES["risk_assessments"]
# Set on every stored row: all but the verdict's own columns (empty when the model's output stayed invalid) and the
# sections removed (empty when none were).
MAYBE_EMPTY = ("risk_score", "risk_level", "summary", "reasoning", "sections_removed")
ALWAYS_SET = [column for column in ASSESSMENT_COLUMNS if column not in MAYBE_EMPTY]
LEVELS = {"low": range(0, 30), "medium": range(30, 60), "high": range(60, 85), "critical": range(85, 101)}


def shipped_trust_for(fingerprint: str) -> dict:
    """The package's shipped measurement of this fingerprint (storage/shipped_trust.py)."""
    (row,) = [row for row in shipped_trust() if row["fingerprint"] == fingerprint]
    return row


def load_trust_columns(db: str, batch_id: str) -> dict:
    columns = ("model_trust", "trust_source", "trust_reason", "model_fingerprint", "model_level")
    (values,) = rows(db, f"SELECT {', '.join(columns)} FROM risk_assessments WHERE batch_id = ?", [batch_id])
    return dict(zip(columns, values, strict=True))


def rows(db: str, sql: str, params=()):
    with duckdb.connect(db, read_only=True) as conn:
        return conn.execute(sql, list(params)).fetchall()


def test_sensor_runs_store_one_assessment_per_batch_with_every_contract_column(llama_server, tmp_path):
    db = str(tmp_path / "hsi.duckdb")
    start = hours_ago(1)
    lines = closed_windows(["front_door", "garage"], 1, start=start)
    lines.append(
        detection(
            "fp-1",
            "front_door",
            start + timedelta(minutes=10),
            "person",
            0.97,
            enrichment={"florence": {"caption": "a person at the front door holding a parcel"}},
        )
    )
    ingest_lines(db, lines)
    res = resources(db, llama_server.url)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        assert len(tick.run_requests) == 3
        for request in tick.run_requests:
            result = dg.materialize(
                PIPELINE, partition_key=request.partition_key, instance=instance, resources=res, tags=request.tags
            )
            assert result.success
            checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
            assert set(checks) == {
                "prompt_fits_budget",
                "stored_assessment_valid",
                "model_level_matches_score",  # a warning: SmolLM2-135M may contradict its own score
                "prompt_within_budget",
                "stored_level_matches_its_text",  # a warning: a summary of forcing, a weapon or violence stored low
            }
            assert checks["prompt_fits_budget"] and checks["stored_assessment_valid"] and checks["prompt_within_budget"]
        assert sensor_tick(batch_window_sensor, instance, res, tick.cursor).run_requests == []

        stored = rows(db, f"SELECT {', '.join(ASSESSMENT_COLUMNS)} FROM risk_assessments ORDER BY batch_id")
        assert sorted(r[0] for r in stored) == sorted(r.partition_key for r in tick.run_requests)
        for row in stored:
            record = dict(zip(ASSESSMENT_COLUMNS, row, strict=True))
            # floor_only: a reply the repair could not use over a floor of medium or more (run at night, the two
            # cameras' strangers minutes apart are one visit: medium), the floor's verdict stored
            assert record["status"] in ("ok", "invalid_output", "floor_only")
            for column in ALWAYS_SET:
                assert record[column] is not None, column
            assert record["prompt_tokens"] <= record["context_budget"]
            # the trust that applied (migration 11): in a fresh database, the one shipped for the bundled SmolLM2
            model_row = load_trust_columns(db, record["batch_id"])
            shipped = shipped_trust_for(model_row["model_fingerprint"])
            assert model_row["trust_source"] == "measured" and model_row["model_trust"] == shipped["trust"]
            assert model_row["model_fingerprint"].startswith(record["model"] + "|")
            assert model_row["trust_reason"].startswith(f"measured trust {shipped['trust']} (shipped with hsi")
            if record["status"] in ("ok", "floor_only"):
                assert record["risk_score"] in LEVELS[record["risk_level"]]
            if record["status"] == "ok":
                assert record["summary"] and record["reasoning"]
        assert any(r[6] == "ok" for r in stored)

        # Re-running a partition replaces its rows: still one per batch, in every stage's table.
        again = tick.run_requests[0].partition_key
        assert dg.materialize(PIPELINE, partition_key=again, instance=instance, resources=res).success
        for table in ("detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"):
            assert rows(db, f"SELECT count(*) FROM {table} WHERE batch_id = ?", [again]) == [(1,)], table
        assert rows(db, "SELECT count(*) FROM detections WHERE batch_id IS NULL") == [(0,)]


# The server stopped mid-run (and restarted): tests/reliability/test_server_faults.py, with a backlog around it.
