"""`hsi metrics serve` counts the bounds at work: detections loaded cut to a bound (contract section 6) and prompts
degraded past the section removals, by step (issue #15 items 9 and 10); an old database without the columns
publishes zeros, not an error."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from prometheus_client import generate_latest

from hsi_dagster.cli.metrics import duckdb_registry
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from tests.cli.test_metrics import samples

REGION = {"label": "person", "caption": "a man", "bbox": [0.1, 0.1, 0.4, 0.9]}


def record(detection_id: str, regions: int) -> str:
    return json.dumps(
        {
            "detection_id": detection_id,
            "camera_id": "garage",
            "ts": "2026-12-01T02:14:05Z",
            "label": "person",
            "confidence": 0.7,
            "enrichment": {"florence": {"regions": [REGION] * regions}},
        }
    )


def test_cut_detections_and_prompt_degradation_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "hsi.duckdb"
    ingest_lines(path, [record("a", 90), record("b", 2), record("c", 65)])
    with connect(path) as conn:
        for batch_id, steps in (("b1", ["florence_lines"]), ("b2", ["florence_lines", "detection_lines"]), ("b3", [])):
            conn.execute(
                "INSERT INTO budgeted_prompts (batch_id, messages, prompt_tokens_estimate, context_budget,"
                " budget_source, sections_removed, prompt_degraded, created_at)"
                " VALUES (?, '[]', 1, 2, 's', [], ?, now())",
                [batch_id, steps],
            )
    found = samples(generate_latest(duckdb_registry(str(path))).decode())
    assert found[("hsi_detections_cut_to_bounds_total", ())] == 2
    assert found[("hsi_prompt_degradation_steps_total", (("step", "florence_lines"),))] == 2
    assert found[("hsi_prompt_degradation_steps_total", (("step", "detection_lines"),))] == 1


def test_a_database_before_the_bounds_migration_publishes_zeros(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with connect(path) as conn:
        conn.execute("ALTER TABLE detections DROP COLUMN enrichment_cuts")
        conn.execute("ALTER TABLE budgeted_prompts DROP COLUMN prompt_degraded")
    with duckdb.connect(str(path), read_only=True) as conn:
        assert not conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE column_name = 'enrichment_cuts'"
        ).fetchall()
    found = samples(generate_latest(duckdb_registry(str(path))).decode())
    assert found[("hsi_detections_cut_to_bounds_total", ())] == 0
    assert not any(name == "hsi_prompt_degradation_steps_total" for name, _ in found)
