"""Evaluation tables: idempotent writes keyed by (configuration, scenario), figures and kappas replaced per run."""

from __future__ import annotations

from pathlib import Path

from hsi_dagster.core.evaluation.metrics import ScenarioResult, summarise
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.evaluation import (
    finish_run,
    load_agreement,
    load_configuration_details,
    load_figures,
    load_results,
    save_configuration,
    save_result,
    stored_configurations,
)


def _result(configuration: str, sid: str, level: str | None, score: int | None) -> ScenarioResult:
    return ScenarioResult(
        configuration=configuration,
        scenario_id=sid,
        category="door_handle_night",
        expected_level="high",
        band_low=60,
        band_high=89,
        adversarial=sid == "s2",
        status="ok" if level else "invalid_output",
        risk_score=score,
        risk_level=level,
        llm_calls=1,
        prompt_tokens=1200,
        completion_tokens=80,
        latency_ms=900.0,
        generation_ms=700.0,
        sections_removed=("depth",),
        model="SmolLM2",
    )


def test_results_are_replaced_not_duplicated_and_a_smaller_run_drops_the_rest(tmp_path: Path) -> None:
    db = tmp_path / "eval.duckdb"
    first = [_result("full", "s1", "low", 10), _result("full", "s2", "high", 70), _result("full", "s3", None, None)]
    with connect(db) as conn:
        save_configuration(
            conn, "full", endpoint="http://127.0.0.1:1", model="m", quality_level="full", prompt_sha256="ab"
        )
        for result in first:
            save_result(conn, result)
        save_result(conn, first[0])  # the same scenario again: replaced
        finish_run(conn, summarise("full", first), ["s1", "s2", "s3"])
        assert load_results(conn, "full") == first
        # a re-run on two scenarios with a different verdict
        second = [_result("full", "s1", "high", 65), _result("full", "s2", "high", 72)]
        for result in second:
            save_result(conn, result)
        finish_run(conn, summarise("full", second), ["s1", "s2"])
        assert load_results(conn, "full") == second
        (figures,) = load_figures(conn)
        assert figures == summarise("full", second)
        assert figures.confusion["high"]["high"] == 2
        assert load_configuration_details(conn)["full"]["endpoint"] == "http://127.0.0.1:1"


def test_agreement_is_one_row_per_pair_in_name_order(tmp_path: Path) -> None:
    db = tmp_path / "eval.duckdb"
    a = [_result("minimal", "s1", "low", 5)]
    b = [_result("full", "s1", "low", 5)]
    with connect(db) as conn:
        for result in a + b:
            save_result(conn, result)
        finish_run(conn, summarise("minimal", a), ["s1"])
        finish_run(conn, summarise("full", b), ["s1"], agreement=[("minimal", None, 1)])
        finish_run(conn, summarise("full", b), ["s1"], agreement=[("minimal", 0.5, 1)])
        assert load_agreement(conn) == [("full", "minimal", 0.5, 1)]
        assert load_agreement(conn, ["full"]) == []
        assert stored_configurations(conn) == ["full", "minimal"]
        assert [f.configuration for f in load_figures(conn, ["minimal"])] == ["minimal"]
