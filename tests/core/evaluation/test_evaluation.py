"""Evaluation metrics against values computed by hand, including the degenerate cases (one class, empty)."""

from __future__ import annotations

import pytest

from hsi_dagster.core.evaluation.metrics import (
    INVALID,
    ScenarioResult,
    band_distance,
    cohen_kappa,
    confusion_matrix,
    f1_by_level,
    level_accuracy,
    macro_f1,
    pairwise_kappa,
    percentile,
    schema_valid_rate,
    score_mae_to_band,
    summarise,
    tokens_per_second,
    under_call_rate,
)

EXPECTED = ["low", "low", "medium", "high", "critical", "high"]
PREDICTED = ["low", "medium", "medium", "low", "critical", None]  # the last output was invalid


def test_level_accuracy_counts_invalid_as_wrong():
    assert level_accuracy(EXPECTED, PREDICTED) == pytest.approx(3 / 6)


def test_macro_f1_by_hand():
    # low: TP 1, FP 1 (a high called low), FN 1 -> P 1/2, R 1/2, F1 1/2
    # medium: TP 1, FP 1, FN 0 -> P 1/2, R 1, F1 2/3
    # high: TP 0 (one called low, one invalid) -> F1 0;  critical: TP 1 -> F1 1
    assert f1_by_level(EXPECTED, PREDICTED) == pytest.approx({"low": 0.5, "medium": 2 / 3, "high": 0.0, "critical": 1})
    assert macro_f1(EXPECTED, PREDICTED) == pytest.approx((0.5 + 2 / 3 + 0 + 1) / 4)  # 13/24


def test_macro_f1_only_averages_levels_that_occur():
    assert macro_f1(["low", "high"], ["low", "low"]) == pytest.approx((2 / 3 + 0) / 2)


def test_under_call_rate_on_high_and_critical():
    # alerts: a high called low (under), a critical called critical, a high with invalid output (under)
    assert under_call_rate(EXPECTED, PREDICTED) == pytest.approx(2 / 3)
    assert under_call_rate(["high"], ["critical"]) == 0.0


def test_score_mae_to_band_is_zero_inside():
    assert band_distance(10, (0, 20)) == 0
    assert band_distance(35, (0, 20)) == 15
    assert band_distance(20, (60, 89)) == 40
    assert band_distance(95, (60, 89)) == 6
    scores = [10, 35, 40, 20, 90, None]
    bands = [(0, 20), (0, 20), (30, 59), (60, 89), (85, 100), (60, 89)]
    assert score_mae_to_band(scores, bands) == pytest.approx((0 + 15 + 0 + 40 + 0) / 5)
    with pytest.raises(ValueError, match="empty"):
        band_distance(5, (10, 0))


def test_cohen_kappa_by_hand():
    # p_o = 3/4; p_e = (2/4)(1/4) + (2/4)(3/4) = 1/2 -> kappa = (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert cohen_kappa(["low", "low", "high", "high"], ["low", "high", "high", "high"]) == pytest.approx(0.5)
    assert cohen_kappa(["low", "high"], ["low", "high"]) == pytest.approx(1.0)
    assert cohen_kappa(["low", "high"], ["high", "low"]) == pytest.approx(-1.0)
    # textbook example: 50 items, yes/yes 20, yes/no 5, no/yes 10, no/no 15 -> p_o 0.7, p_e 0.5, kappa 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_percentile_nearest_rank():
    values = [50, 15, 40, 20, 35]  # sorted: 15 20 35 40 50
    assert percentile(values, 30) == 20  # rank ceil(1.5) = 2
    assert percentile(values, 40) == 20  # rank 2
    assert percentile(values, 50) == 35  # rank ceil(2.5) = 3
    assert percentile(values, 95) == 50  # rank ceil(4.75) = 5
    assert percentile(values, 100) == 50
    assert percentile([7.5], 95) == 7.5
    with pytest.raises(ValueError):
        percentile(values, 0)


def test_tokens_per_second_is_a_ratio_of_sums():
    assert tokens_per_second([10, 30], [500, 1500]) == pytest.approx(20.0)


def test_schema_valid_rate():
    assert schema_valid_rate(["ok", "invalid_output", "ok", "ok"]) == pytest.approx(0.75)


def test_one_class():
    assert level_accuracy(["low", "low"], ["low", "low"]) == 1.0
    assert macro_f1(["low", "low"], ["low", "low"]) == 1.0
    assert macro_f1(["low", "low"], [None, None]) == 0.0  # the only level is always missed
    assert under_call_rate(["low", "low"], ["low", "high"]) is None  # no alert scenario: undefined, not 0
    assert cohen_kappa(["low", "low"], ["low", "low"]) is None  # chance agreement is total: undefined


def test_empty():
    assert level_accuracy([], []) is None
    assert macro_f1([], []) is None
    assert score_mae_to_band([], []) is None
    assert score_mae_to_band([None], [(0, 10)]) is None
    assert under_call_rate([], []) is None
    assert cohen_kappa([], []) is None
    assert percentile([], 50) is None
    assert tokens_per_second([], []) is None
    assert tokens_per_second([5], [0.0]) is None
    assert schema_valid_rate([]) is None


def test_lengths_must_match():
    with pytest.raises(ValueError, match="length"):
        level_accuracy(["low"], [])


def test_confusion_matrix_has_an_invalid_column():
    matrix = confusion_matrix(EXPECTED, PREDICTED)
    assert matrix["low"] == {"low": 1, "medium": 1, "high": 0, "critical": 0, INVALID: 0}
    assert matrix["high"] == {"low": 1, "medium": 0, "high": 0, "critical": 0, INVALID: 1}
    assert sum(sum(row.values()) for row in matrix.values()) == len(EXPECTED)


def _result(sid: str, expected: str, level: str | None, score: int | None, **extra) -> ScenarioResult:
    bands = {"low": (0, 20), "medium": (30, 59), "high": (60, 89), "critical": (85, 100)}
    return ScenarioResult(
        configuration=extra.pop("configuration", "a"),
        scenario_id=sid,
        category="c",
        expected_level=expected,
        band_low=bands[expected][0],
        band_high=bands[expected][1],
        adversarial=extra.pop("adversarial", False),
        status="ok" if level else "invalid_output",
        risk_score=score,
        risk_level=level,
        llm_calls=extra.pop("llm_calls", 1),
        **extra,
    )


def test_summarise_by_hand():
    results = [
        _result("s1", "low", "low", 10, latency_ms=1000, completion_tokens=50, generation_ms=500, prompt_tokens=900),
        _result("s2", "low", "medium", 35, latency_ms=3000, completion_tokens=70, generation_ms=1500),
        _result("s3", "high", "low", 20, latency_ms=2000, completion_tokens=60, generation_ms=1000, adversarial=True),
        _result("s4", "critical", None, None, latency_ms=4000, llm_calls=2, completion_tokens=20, generation_ms=1000),
    ]
    figures = summarise("a", results)
    assert figures.scenarios == 4
    assert figures.schema_valid_rate == pytest.approx(3 / 4)
    assert figures.level_accuracy == pytest.approx(1 / 4)
    assert figures.score_mae_to_band == pytest.approx((0 + 15 + 40) / 3)
    assert figures.under_call_rate == 1.0 and figures.alert_scenarios == 2
    assert figures.latency_p50_ms == 2000 and figures.latency_p95_ms == 4000
    assert figures.tokens_per_second == pytest.approx(200 / 4.0)
    assert figures.llm_calls == 5 and figures.prompt_tokens == 900
    assert (figures.adversarial_correct, figures.adversarial_scenarios) == (0, 1)
    assert figures.confusion["critical"][INVALID] == 1


def test_pairwise_kappa_uses_scenarios_both_assessed():
    a = [_result("s1", "low", "low", 5), _result("s2", "high", "high", 70), _result("s3", "low", None, None)]
    b = [_result("s1", "low", "low", 5), _result("s2", "high", "low", 10), _result("s3", "low", "low", 3)]
    kappa, n = pairwise_kappa(a, b)
    # over s1, s2: a = [low, high], b = [low, low]; p_o 1/2, p_e (1/2)(1) + (1/2)(0) = 1/2 -> kappa 0
    assert n == 2 and kappa == pytest.approx(0.0)
