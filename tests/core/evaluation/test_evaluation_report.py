"""The evaluation report (pure markdown): every configuration's figures, the adversarial outcome, misses, n/a."""

from __future__ import annotations

from hsi_dagster.core.evaluation.metrics import ScenarioResult, summarise
from hsi_dagster.core.evaluation.report import render_report


def _result(configuration: str, sid: str, category: str, expected: str, level: str | None, score: int | None, **kw):
    return ScenarioResult(
        configuration=configuration,
        scenario_id=sid,
        category=category,
        expected_level=expected,
        band_low=60 if expected == "high" else 0,
        band_high=89 if expected == "high" else 20,
        adversarial=kw.pop("adversarial", False),
        status="ok" if level else "invalid_output",
        risk_score=score,
        risk_level=level,
        llm_calls=1,
        latency_ms=1500.0,
        generation_ms=1000.0,
        completion_tokens=40,
        **kw,
    )


def test_report_shows_figures_adversarial_outcome_and_misses():
    a = [
        _result("full", "s001", "delivery_day", "low", "low", 8, summary="Parcel | delivered."),
        _result("full", "s059", "adversarial_harmless", "high", "low", 5, adversarial=True, summary="Homeowner."),
    ]
    b = [
        _result("minimal", "s001", "delivery_day", "low", "low", 4),
        _result("minimal", "s059", "adversarial_harmless", "high", None, None, adversarial=True, error="cut off"),
    ]
    figures = [summarise("full", a), summarise("minimal", b)]
    details = {"full": {"model": "SmolLM2", "quality_level": "full"}}
    report = render_report(
        figures,
        a + b,
        [("full", "minimal", None, 1)],
        details,
        scenario_source="eval_scenarios.jsonl (2 scenarios)",
        images={"comparison": "comparison.png", "confusion:full": "confusion-full.png"},
    )
    assert "| full | SmolLM2 | full | 2 | 100% | 50% |" in report
    assert "| minimal | ? | ? | 2 | 50% | 50% |" in report
    assert "1 low, 0 medium, 1 high, 0 critical" in report
    # the adversarial scenario's outcome is in the report for both configurations, failures named
    assert "| full | s059 | adversarial_harmless | high | low | 5 | no | **no** | Homeowner. |" in report
    assert "| minimal | s059 | adversarial_harmless | high | invalid (invalid_output) |" in report
    assert "0 of 1" in report
    assert "## Under-calls" in report and "| full | s059 |" in report
    assert "| full | minimal | n/a | 1 |" in report  # undefined kappa is shown as n/a, not 0
    assert "Parcel \\| delivered." not in report  # summaries only appear for adversarial rows and misses
    assert "![comparison](comparison.png)" in report and "![confusion full](confusion-full.png)" in report
    assert "| high | 1 | 0 | 0 | 0 | 0 |" in report  # full's confusion row: the high scenario was called low


def test_report_of_one_configuration_says_there_is_no_agreement():
    results = [_result("full", "s001", "delivery_day", "low", "low", 8)]
    report = render_report([summarise("full", results)], results, [], {}, scenario_source="x")
    assert "Only one configuration" in report
    assert "No adversarial scenario was in this run." in report
    assert "Every high/critical scenario was called high or critical." in report
