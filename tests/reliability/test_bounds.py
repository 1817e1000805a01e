"""#15 item 9 on the real pipeline (embedded llama.cpp server, a real Dagster instance, a DuckDB file): a person
detection with 90 Florence regions is loaded cut to the bound (INGEST_MAX_FLORENCE_REGIONS, 64), the cut recorded
on its row and counted, batched and assessed; a record whose required field is over its bound is quarantined with
a reason naming the bound. Every ingested detection ends in exactly one assessed batch or in quarantine."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.assessments import risk_assessments
from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.sensors import batch_window_sensor
from hsi_dagster.settings import load_settings
from hsi_dagster.storage.ingest import ingest_files
from tests.support.ledger import counts
from tests.support.pipeline_helpers import hours_ago, materialize_request, resources, sensor_tick
from tests.support.rich_batches import detection_records

pytestmark = pytest.mark.llm
PIPELINE = [detection_batches, enriched_contexts, budgeted_prompts, risk_assessments]


def ledger(db: str) -> dict[str, int]:
    """Where every detection ended (the columns of docs/RELIABILITY.md)."""
    return counts(
        db,
        {
            "detections": "SELECT count(*) FROM detections",
            "quarantined": "SELECT count(*) FROM quarantine",
            "batches": "SELECT count(*) FROM detection_batches",
            # the model's verdict stored: schema-valid (ok) or not after one repair (SmolLM2-135M sometimes)
            "assessments": "SELECT count(*) FROM risk_assessments WHERE status IN ('ok', 'invalid_output')",
            # a stored detection in no batch, or in a batch without a stored assessment
            "lost": "SELECT count(*) FROM detections d WHERE NOT EXISTS (SELECT 1 FROM detection_batches b"
            " JOIN risk_assessments r USING (batch_id) WHERE list_contains(b.detection_ids, d.detection_id)"
            " AND d.batch_id = b.batch_id)",
            "duplicates": "SELECT (SELECT count(*) FROM (SELECT id FROM (SELECT unnest(detection_ids) AS id"
            " FROM detection_batches) GROUP BY id HAVING count(*) > 1))"
            " + (SELECT count(*) - count(DISTINCT batch_id) FROM risk_assessments)",
        },
    )


@pytest.mark.slow
def test_ninety_regions_are_cut_batched_and_assessed_and_an_oversize_field_quarantined(
    llama_server, tmp_path: Path
) -> None:
    started = time.monotonic()
    db = str(tmp_path / "hsi.duckdb")
    garage = detection_records(n_detections=3, n_regions=90)  # one regular batch at night, 90 regions each
    fast = {
        **detection_records(n_detections=1, n_regions=90, camera="front_door")[0],
        "detection_id": "front-person",
        "confidence": 0.97,  # the fast path: a batch of its own
    }
    fast["enrichment"]["florence"]["caption"] = "a person at the front door at night " + "very " * 600  # > 2048
    over_label = {**garage[0], "detection_id": "long-label", "label": "person " * 12}  # 84 chars > 64
    over_id = {**garage[0], "detection_id": "x" * 129}  # the contract's own bound
    records = [*garage, fast, over_label, over_id]
    for record in records:  # recent, so the sensor sees the windows as closed and within retention
        record["ts"] = record["ts"].replace("2026-12-02T02:", hours_ago(2).strftime("%Y-%m-%dT%H:"))
    path = tmp_path / "night.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    report = ingest_files(db, [path], settings=load_settings("/dev/null"))
    assert (report.loaded, report.quarantined, report.cut) == (4, 2, 4)

    with duckdb.connect(db, read_only=True) as conn:
        cut = dict(conn.execute("SELECT detection_id, enrichment_cuts FROM detections").fetchall())
        reasons = dict(conn.execute("SELECT line_no, reason FROM quarantine").fetchall())
        regions = conn.execute(
            "SELECT json_array_length(enrichment -> '$.florence.regions') FROM detections"
        ).fetchall()
    assert {n for (n,) in regions} == {64}
    assert json.loads(cut["garage-night-000"]) == [
        "enrichment.florence.regions: 90 items cut to the first 64 (INGEST_MAX_FLORENCE_REGIONS=64)"
    ]
    assert [c.split(":")[0] for c in json.loads(cut["front-person"])] == [
        "enrichment.florence.caption",
        "enrichment.florence.regions",
    ]
    assert reasons[5].startswith("label: must be 1-64 characters") and "INGEST_MAX_LABEL_CHARS" in reasons[5]
    assert reasons[6].startswith("detection_id: must be 1-128 characters")

    res = resources(db, llama_server.url)
    with dg.instance_for_test() as instance:
        tick = sensor_tick(batch_window_sensor, instance, res, None)
        assert len(tick.run_requests) == 2  # the garage batch and the fast-path person
        for request in tick.run_requests:
            result = materialize_request(PIPELINE, request, instance, res)
            assert result.success
        with duckdb.connect(db, read_only=True) as conn:
            prompts = conn.execute("SELECT messages FROM budgeted_prompts").fetchall()
        assert all("region" in messages for (messages,) in prompts)  # the kept regions reach the prompt
        again = sensor_tick(batch_window_sensor, instance, res, tick.cursor)
        assert not again.run_requests  # nothing left, nothing repeated

    with duckdb.connect(db, read_only=True) as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM risk_assessments GROUP BY status").fetchall())
    figures = ledger(db)
    assert figures == {"detections": 4, "quarantined": 2, "batches": 2, "assessments": 2, "lost": 0, "duplicates": 0}
    print(
        f"\nROW-9 figures: {figures}, statuses {statuses}, in {time.monotonic() - started:.1f} s"
    )  # for docs/RELIABILITY.md
