"""PipelineSettingsResource: typed fields that carry every setting the pipeline reads, and only those."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.core.intake.detections import Bounds
from hsi_dagster.core.verdict.evidence import EvidenceRules
from hsi_dagster.resources.settings import NOT_PIPELINE_SETTINGS, PipelineSettingsResource
from hsi_dagster.settings import HsiSettings, load_settings

PACKAGE = Path(__file__).resolve().parents[2] / "hsi_dagster"
# Code that runs in the pipeline's steps and sensors and reads settings only through PipelineSettingsResource.get().
PIPELINE_CODE = ("assets", "sensors", "evaluation", "core", "storage", "jobs.py")
# Reads that do not come from the resource: ingest without a connection opens the configured database (`hsi ingest`
# passes its own full settings).
EXEMPT = {"storage/ingest.py": {"HSI_DUCKDB_PATH"}}

CHANGED = {
    "BATCH_WINDOW_SECONDS": 75.0,
    "FAST_PATH_LABELS": "person,dog",
    "INGEST_MAX_LINE_BYTES": 4096,
    "HSI_INBOX_DIR": "/srv/inbox",
    "ENRICHMENT_QUALITY_LEVEL": "minimal",
    "CAMERA_CONTEXT_PATH": "/etc/hsi/cameras.yaml",
    "CTX_SIZE": 16384,
    "ASSESSMENT_SCHEMA": "plain",
    "HISTORY_DAYS": 30,
    "EVIDENCE_WEAPON_LABELS": "knife,axe",
    "EVIDENCE_LOITER_SECONDS": 45.0,
    "FRIGATE_WRITEBACK": "both",
    "MODEL_TRUST": "1",
    "VISIT_GAP_SECONDS": 240.0,
    "PROMPT_HOUSEHOLD_EXAMPLES": 1,
}


def test_every_setting_is_a_typed_field_or_belongs_elsewhere() -> None:
    fields = set(PipelineSettingsResource.model_fields)
    every = set(HsiSettings.model_fields)
    assert every - fields - NOT_PIPELINE_SETTINGS == set(), "a new setting: add it to the resource or to the list"
    assert fields <= every and not fields & NOT_PIPELINE_SETTINGS


def test_the_config_schema_is_typed_not_a_dict() -> None:
    schema = PipelineSettingsResource.to_config_schema().as_field().config_type
    # Dagster's scalar types; Int, Bool and String fields also accept {env: NAME} ("...Source").
    field_types = {name: field.config_type.key.removesuffix("SourceType") for name, field in schema.fields.items()}
    assert field_types["BATCH_WINDOW_SECONDS"] == "Float"
    assert field_types["SENSOR_MAX_BATCHES_PER_TICK"] == "Int"
    assert field_types["HISTORY_ENABLED"] == "Bool"
    assert field_types["HSI_INBOX_DIR"] == "String"
    assert "values" not in field_types


def test_get_rebuilds_exactly_the_configured_settings(tmp_path) -> None:
    settings = load_settings(env_file=str(tmp_path / "absent.env"), **CHANGED)
    resource = PipelineSettingsResource.from_settings(settings)
    rebuilt = resource.get()
    for name in PipelineSettingsResource.model_fields:
        assert getattr(rebuilt, name) == getattr(settings, name), name
    assert rebuilt.FAST_PATH_LABELS == ("person", "dog")
    assert EvidenceRules.from_settings(rebuilt) == EvidenceRules.from_settings(settings)
    assert Bounds.from_settings(rebuilt) == Bounds.from_settings(settings)


def test_a_bad_value_in_run_config_is_refused_by_dagster() -> None:
    @dg.asset
    def reads(pipeline_settings: PipelineSettingsResource) -> None:
        pipeline_settings.get()

    resource = PipelineSettingsResource.from_settings(load_settings(env_file="/nonexistent"))
    config = {**resource.field_values(), "SENSOR_MAX_BATCHES_PER_TICK": "many"}
    with pytest.raises(dg.DagsterInvalidConfigError, match="SENSOR_MAX_BATCHES_PER_TICK"):
        dg.materialize(
            [reads],
            resources={"pipeline_settings": resource},
            run_config={"resources": {"pipeline_settings": {"config": config}}},
        )


LOAD_TIME_READERS = {"load_settings", "default_status_when"}  # read the whole settings where the definitions load


def _calls_load_settings(function: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LOAD_TIME_READERS
        for node in ast.walk(function)
    )


def _attribute_reads(path: Path) -> set[str]:
    """Attribute names read in the module, except inside functions that read the whole settings themselves
    (`load_settings()`, `default_status_when`: a sensor's default status, decided where the code location loads)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef) and _calls_load_settings(function)
        for node in ast.walk(function)
    }
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and id(node) not in skipped}


def test_pipeline_code_reads_no_setting_the_resource_leaves_out() -> None:
    """Settings outside the resource would come back from get() at their defaults: the pipeline must not read them."""
    found = {}
    for part in PIPELINE_CODE:
        paths = [PACKAGE / part] if part.endswith(".py") else sorted((PACKAGE / part).rglob("*.py"))
        for path in paths:
            relative = path.relative_to(PACKAGE).as_posix()
            if reads := _attribute_reads(path) & NOT_PIPELINE_SETTINGS - EXEMPT.get(relative, set()):
                found[relative] = sorted(reads)
    assert found == {}
