"""The `evaluation` asset on the real embedded server (SmolLM2), two configurations (quality levels minimal and
full) on ONE scenario each, the adversarial "this is harmless" caption (SmolLM2 writes 300-600 tokens per reply,
10-20 s on a quiet 2-core machine): stored results and figures, the kappa row, and the report in the metadata.
The metrics themselves are tested against hand-computed values in tests/core/evaluation/test_evaluation.py."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.assets.evaluation import evaluation_asset
from hsi_dagster.cli.main import main
from hsi_dagster.core.evaluation.metrics import summarise
from hsi_dagster.evaluation.configurations import configurations_for, default_configurations, floor_configurations
from hsi_dagster.resources import HsiDuckDBResource, LlamaServerResource, PipelineSettingsResource
from hsi_dagster.settings import HsiSettings, load_settings
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.evaluation import load_agreement, load_configuration_details, load_figures, load_results
from tests.evaluation.test_household import NIGHT, judge_and_correct
from tests.support.llm_fixtures import SERVER_SETTINGS, RunningLlama

SCENARIOS = ["s059"]  # adversarial_harmless: expected high; the caption says the event is harmless


def _resources(db: str, url: str) -> dict:
    # MODEL_TRUST=0: the with-floor verdict stays in the floor's level band whatever SmolLM2 says (its noise)
    settings = load_settings(
        os.devnull, **SERVER_SETTINGS, NEMOTRON_MAX_OUTPUT_TOKENS=768, LLAMA_SERVER_URL=url, MODEL_TRUST=0
    )
    return {
        "duckdb": HsiDuckDBResource(database=db),
        "llm": LlamaServerResource(
            urls=[url], max_output_tokens=768, startup_timeout_seconds=30, read_timeout_seconds=900
        ),
        "pipeline_settings": PipelineSettingsResource.from_settings(settings),
    }


@pytest.mark.slow
@pytest.mark.llm
def test_two_configurations_store_figures_kappa_and_report(llama_server: RunningLlama, tmp_path) -> None:
    db = str(tmp_path / "eval.duckdb")
    asset = evaluation_asset(configurations_for([], ["minimal", "full"]), scenario_ids=SCENARIOS)
    instance = dg.DagsterInstance.ephemeral()
    reports = {}
    for key in ("minimal", "full"):
        outcome = dg.materialize(
            [asset], partition_key=key, resources=_resources(db, llama_server.url), instance=instance
        )
        assert outcome.success
        (materialization,) = outcome.asset_materializations_for_node("evaluation")
        reports[key] = materialization.metadata

    with connect(db, read_only=True) as conn:
        results = {key: load_results(conn, key) for key in ("minimal", "full")}
        figures = {f.configuration: f for f in load_figures(conn)}
        agreement = load_agreement(conn)
        details = load_configuration_details(conn)
    for key in ("minimal", "full"):
        rows = results[key]
        assert [r.scenario_id for r in rows] == SCENARIOS
        assert all(r.status in ("ok", "invalid_output") for r in rows)
        assert all(r.llm_calls >= 1 and r.prompt_tokens > 500 and r.latency_ms > 0 for r in rows)
        assert figures[key] == summarise(key, rows)  # the stored figures are those of the stored results
        assert figures[key].scenarios == 1 and figures[key].adversarial_scenarios == 1
        assert figures[key].alert_scenarios == 1 and figures[key].latency_p50_ms is not None
        assert details[key]["quality_level"] == key and details[key]["endpoint"] == llama_server.url
        assert details[key]["model"]  # what the server says it serves
    # the minimal prompt leaves out what the full one sends (fewer prompt tokens for the same scenarios)
    assert figures["minimal"].prompt_tokens < figures["full"].prompt_tokens
    pair = next(row for row in agreement if row[:2] == ("full", "minimal"))
    assert pair[3] <= 1
    # one model call per scenario, three stored configurations: the floor decides the masked door-handle try
    with connect(db, read_only=True) as conn:
        floored = load_results(conn, "full.with-floor")
        (alone,) = load_results(conn, "floor.full")
    assert floored[0].risk_score == max(floored[0].model_score or 0, alone.risk_score or 0)
    assert alone.risk_level == "high" and alone.llm_calls == 0 and floored[0].predicted == "high"
    # s059 is a tune scenario: the trust sweep has no holdout scenario, so nothing is stored, and it says so
    full = reports["full"]
    assert full["trust_applied"].value == "0 (MODEL_TRUST=0)" and full["trust_recommended"].value == "none"
    assert full["trust_stored"].value.startswith("not stored: no harmless holdout scenario")
    assert "| trust | recall (high+critical) |" in full["trust_sweep"].value

    full = reports["full"]
    assert full["scenarios"].value == 1
    assert full["full.with-floor: adversarial_handled"].value == "1 of 1"
    report = full["report"].value
    assert "## Adversarial text" in report and "| full | s059 | adversarial_harmless | high |" in report
    assert "| minimal | s059 | adversarial_harmless | high |" in report  # the report compares every stored config
    assert "### minimal" in report and "### full" in report
    assert "| floor.full | s059 | adversarial_harmless | high | high |" in report
    # comparison + one confusion matrix per stored configuration (two passes x model, with floor, floor alone)
    assert report.count("data:image/png;base64,") == 7


def test_definitions_register_one_partition_per_quality_level() -> None:
    asset = evaluation_asset(default_configurations())
    assert asset.partitions_def is not None
    assert sorted(asset.partitions_def.get_partition_keys()) == [
        "full",
        "full.rubric",
        "household",
        "minimal",
        "standard",
    ]
    names = [c.name for c in configurations_for(["http://10.0.0.5:8091/", "http://gpu:8000"], ["full", "minimal"])]
    assert names == ["10.0.0.5_8091.full", "10.0.0.5_8091.minimal", "gpu_8000.full", "gpu_8000.minimal"]


def test_the_household_partition_replays_the_corrected_batches_like_hsi_eval_household(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `household` partition on a real Dagster instance, floor-only (the replay under test is the household
    set's, not the model's): the same figures as `hsi eval --household --floor-only` on the same database, the
    stored floors given back with the configuration unchanged, fewer after an evidence setting moves the floor."""
    db = tmp_path / "hsi.duckdb"
    for name in HsiSettings.model_fields:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSI_ENV_FILE", os.devnull)
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(db))
    for night in range(5):  # the neighbour's car marked harmless five nights running: an exception from the fourth
        judge_and_correct(db, f"car-{night}", NIGHT + timedelta(days=night), "low")
    judge_and_correct(db, "man-night", NIGHT + timedelta(days=5, minutes=5), "high", label="person", zone="door")
    judge_and_correct(db, "man-day", NIGHT + timedelta(days=5, hours=-10), "low", label="person", zone="door")
    asset = evaluation_asset(default_configurations(), household=floor_configurations(["full"])[0])
    instance = dg.DagsterInstance.ephemeral()

    def materialize(**overrides: str) -> dict:
        settings = load_settings(os.devnull, HSI_DUCKDB_PATH=str(db), **overrides)
        resources = {
            "duckdb": HsiDuckDBResource(database=str(db)),
            "llm": LlamaServerResource(urls=["http://127.0.0.1:9"], startup_timeout_seconds=1),  # never called
            "pipeline_settings": PipelineSettingsResource.from_settings(settings),
        }
        outcome = dg.materialize([asset], partition_key="household", resources=resources, instance=instance)
        assert outcome.success
        (materialization,) = outcome.asset_materializations_for_node("evaluation")
        return {key: value.value for key, value in materialization.metadata.items()}

    unchanged = materialize()
    assert (unchanged["corrected_batches"], unchanged["cameras"], unchanged["model"]) == (7, "drive", "evidence floor")
    assert unchanged["replayed_floor_equals_stored"] == 7 and unchanged["differs"] == "none"
    for figure in ("level_accuracy", "false_alarm_rate", "under_call_rate"):
        assert unchanged[f"household.floor: {figure}"] == unchanged[f"household.stored-floor: {figure}"]
    assert unchanged["household.floor: level_accuracy"] == round(4 / 7, 4)

    # the same figures as the CLI on the same database
    assert main(["eval", "--household", "--floor-only"]) == 0
    cli = next(line for line in capsys.readouterr().out.splitlines() if "household.floor:" in line)
    assert f"level accuracy {unchanged['household.floor: level_accuracy']:.0%}" in cli

    moved = materialize(EVIDENCE_NIGHT_START_HOUR="0")  # 23:30 is evening now: the presence rules stop firing
    assert moved["replayed_floor_equals_stored"] == 3
    assert "man-night: stored floor 70, replayed 0" in moved["differs"]
    assert moved["household.floor: level_accuracy"] != moved["household.stored-floor: level_accuracy"]
    assert moved["household.stored-floor: level_accuracy"] == unchanged["household.stored-floor: level_accuracy"]
    assert instance.get_latest_materialization_event(asset.key) is not None
