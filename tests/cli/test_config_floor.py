"""The prompt floor `hsi config check` reports (cli/config_probe.py, cli/config_findings.py) is the floor the
pipeline hits: for each output schema, the config check's probe batch is ingested into a real DuckDB file and run
through the real `detection_batches`, `enriched_contexts` and `budgeted_prompts` assets (a real Dagster instance)
with a budget below the floor; the floor `budgeted_prompts` records (PromptTooLarge's minimum) equals the one the
config check computes and prints.

The config check once built its context with literals, without the history sections or the batch id the pipeline
gives, and counted the floor with the plain schema's static prompt: with ASSESSMENT_SCHEMA=rubric it under-stated the
floor by about 120 tokens."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.assets.contexts import enriched_contexts
from hsi_dagster.assets.prompts import budgeted_prompts
from hsi_dagster.cli.config_findings import check_config
from hsi_dagster.cli.config_probe import probe_batch, probe_contexts
from hsi_dagster.core.intake.batching import BatchRules
from hsi_dagster.partitions import batch_partitions
from hsi_dagster.resources import PipelineSettingsResource
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.steps import prompt_floor_for
from hsi_dagster.storage.batches import pending_closed_batches
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.ingest import ingest_lines
from tests.support.pipeline_helpers import resources

CAMERA = "camera_without_profile"  # the config check's probe camera when no profile file is set


def record(detection: dict[str, Any]) -> str:
    """A probe detection as a contract line (timestamps in ISO 8601, UTC)."""
    return json.dumps(
        {
            key: value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value
            for key, value in detection.items()
        }
    )


def settings_for(schema: str, db: Path) -> HsiSettings:
    # 1024 + 512 output tokens per slot; a margin that leaves 64 prompt tokens: far below any floor
    return load_settings(
        os.devnull,
        ASSESSMENT_SCHEMA=schema,
        CTX_SIZE=1600,
        PARALLEL=1,
        NEMOTRON_MAX_OUTPUT_TOKENS=512,
        PROMPT_SAFETY_MARGIN_TOKENS=1024,
        HSI_DUCKDB_PATH=str(db),
        HSI_INBOX_DIR=str(db.parent / "inbox"),
    )


def floor_the_asset_records(settings: HsiSettings, db: Path) -> int:
    _, detections = probe_batch(CAMERA)
    report = ingest_lines(str(db), [record(d) for d in detections])
    assert (report.loaded, report.quarantined) == (len(detections), 0)
    with connect(str(db)) as conn:
        (batch,) = pending_closed_batches(conn, BatchRules.from_settings(settings), datetime.now(UTC))
    assert len(batch.detection_ids) == len(detections)  # the probe batch is one window
    res = {
        **resources(str(db)),  # the llm resource points at a closed port: the budget comes from the settings
        "pipeline_settings": PipelineSettingsResource.from_settings(settings),
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(batch_partitions.name, [batch.batch_id])
        result = dg.materialize(
            [detection_batches, enriched_contexts, budgeted_prompts],
            partition_key=batch.batch_id,
            instance=instance,
            resources=res,
            raise_on_error=False,
        )
    assert not result.success  # the floor does not fit the budget
    with duckdb.connect(str(db), read_only=True) as conn:
        status, error = conn.execute("SELECT status, error FROM risk_assessments").fetchone()  # type: ignore[misc]
    assert status == "prompt_too_large"
    found = re.search(r"at least (\d+) tokens", error)
    assert found, error
    return int(found.group(1))


@pytest.mark.parametrize("schema", ["plain", "rubric"])
def test_the_config_check_floor_is_the_floor_the_asset_hits(tmp_path: Path, schema: str) -> None:
    settings = settings_for(schema, tmp_path / "hsi.duckdb")
    contexts = probe_contexts(settings, {CAMERA: None})
    config_floor = prompt_floor_for(contexts[CAMERA], schema)
    asset_floor = floor_the_asset_records(settings, tmp_path / "hsi.duckdb")
    assert config_floor == asset_floor
    printed = [f.message for f in check_config(settings) if "the smallest prompt a batch can be sent" in f.message]
    assert len(printed) == 1 and f"is {config_floor} cl100k tokens" in printed[0]


def test_the_rubric_floor_is_higher_than_the_plain_one(tmp_path: Path) -> None:
    """The two schemas' static prompts differ, and so do their floors: the config check tells them apart."""
    plain, rubric = (
        prompt_floor_for(probe_contexts(settings_for(schema, tmp_path / "hsi.duckdb"), {CAMERA: None})[CAMERA], schema)
        for schema in ("plain", "rubric")
    )
    assert rubric > plain + 50
