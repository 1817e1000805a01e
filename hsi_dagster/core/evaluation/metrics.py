"""Judgment-quality metrics of one configuration (endpoint, model, prompt, quality level) on the labeled scenarios.

Pure functions over plain values. Definitions (docs/evaluation.md repeats them):
- schema-valid rate: share of scenarios whose final output (after the production's one repair attempt) parsed into
  a risk assessment (`status == "ok"`).
- level accuracy: share of ALL scenarios whose level equals the expected level; an invalid output counts as wrong.
- macro-F1: the mean over levels of F1 = 2PR / (P + R) (0 when P + R = 0), over the levels that occur in the
  expected or the predicted labels; an invalid output is a miss for its expected level and nobody's false positive.
- score MAE to the band: mean distance from the score to the acceptable band (0 inside it), over valid outputs.
- under-call rate: share of the scenarios expected high or critical that got neither (invalid counts as an
  under-call: no alert goes out). The costly error of a security system. Recall of high+critical = 1 - under-call.
- false-alarm rate: share of the scenarios expected low that were raised to high or critical (an alert at 3 am
  for the cat). The other error a household stops trusting the system for.
- a verdict: status `ok` (the model answered) or `floor_only` (no usable model output, but the evidence floor alone
  is a verdict, core/verdict/final.py); both count as predicted levels. Schema-valid counts `ok` only.
- Cohen's kappa: (p_o - p_e) / (1 - p_e) between two label sequences; None when p_e = 1 (both raters used one and
  the same label throughout: agreement by chance is total, kappa is undefined).
- percentiles: nearest rank: the smallest value with at least p % of the values at or below it
  (value at rank ceil(p / 100 * n), 1-based).
- tokens per second: generated tokens / generation seconds (llama-server's own `timings.predicted_ms`; the wall
  time of the call for servers that do not report timings).
Every function returns None (never 0 or NaN) when its input is empty: an undefined figure is shown as "n/a".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")
ALERT_LEVELS = frozenset({"high", "critical"})
INVALID = "invalid"  # confusion-matrix column of outputs that could not be used
VERDICT_STATUSES = frozenset({"ok", "floor_only"})  # statuses that carry a level (core/verdict/final.py)


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario run under one configuration: the label, what the model said, what it cost."""

    configuration: str
    scenario_id: str
    category: str
    expected_level: str
    band_low: int
    band_high: int
    adversarial: bool
    status: str  # "ok" or the production failure status (invalid_output, llm_rejected, prompt_too_large, ...)
    risk_score: int | None = None
    risk_level: str | None = None
    summary: str | None = None
    injection_flagged: bool = False
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_ms: float = 0.0
    generation_ms: float = 0.0
    sections_removed: tuple[str, ...] = ()
    model: str | None = None
    error: str | None = None
    split: str | None = None  # the scenario's split (tune / holdout)
    model_score: int | None = None  # the model's own verdict score (None: no usable output, or no model)
    floor_score: int | None = None  # the evidence floor (None: the configuration has no floor)
    floor_reasons: tuple[str, ...] = ()
    decided_by: str | None = None  # "model" | "floor" when both were there

    @property
    def predicted(self) -> str | None:
        return self.risk_level if self.status in VERDICT_STATUSES else None

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["sections_removed"] = list(self.sections_removed)
        row["floor_reasons"] = list(self.floor_reasons)
        return row


@dataclass(frozen=True)
class ConfigurationFigures:
    """The stored figures of one configuration."""

    configuration: str
    scenarios: int
    schema_valid_rate: float | None
    level_accuracy: float | None
    macro_f1: float | None
    score_mae_to_band: float | None
    under_call_rate: float | None
    alert_scenarios: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    tokens_per_second: float | None
    llm_calls: int
    adversarial_correct: int
    adversarial_scenarios: int
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    false_alarm_rate: float | None = None
    low_scenarios: int = 0

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- metrics
def schema_valid_rate(statuses: Sequence[str]) -> float | None:
    if not statuses:
        return None
    return sum(status == "ok" for status in statuses) / len(statuses)


def level_accuracy(expected: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    _same_length(expected, predicted)
    if not expected:
        return None
    return sum(e == p for e, p in zip(expected, predicted, strict=True)) / len(expected)


def f1_by_level(expected: Sequence[str], predicted: Sequence[str | None]) -> dict[str, float]:
    """F1 per level occurring in either sequence (None predictions are misses, not a level)."""
    _same_length(expected, predicted)
    labels = [level for level in LEVELS if level in expected or level in predicted]
    labels += sorted({x for x in (*expected, *predicted) if x is not None and x not in LEVELS})
    scores = {}
    for label in labels:
        tp = sum(e == label and p == label for e, p in zip(expected, predicted, strict=True))
        fp = sum(e != label and p == label for e, p in zip(expected, predicted, strict=True))
        fn = sum(e == label and p != label for e, p in zip(expected, predicted, strict=True))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        scores[label] = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return scores


def macro_f1(expected: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    scores = f1_by_level(expected, predicted)
    if not scores:
        return None
    return sum(scores.values()) / len(scores)


def band_distance(score: int, band: tuple[int, int]) -> int:
    """0 inside [low, high], else how far outside."""
    low, high = band
    if low > high:
        raise ValueError(f"score band {band} is empty (low > high)")
    return max(low - score, 0, score - high)


def score_mae_to_band(scores: Sequence[int | None], bands: Sequence[tuple[int, int]]) -> float | None:
    """Mean band distance over the scores that exist (None = no valid output, left out)."""
    _same_length(scores, bands)
    distances = [band_distance(score, band) for score, band in zip(scores, bands, strict=True) if score is not None]
    if not distances:
        return None
    return sum(distances) / len(distances)


def under_call_rate(expected: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    _same_length(expected, predicted)
    alerts = [p for e, p in zip(expected, predicted, strict=True) if e in ALERT_LEVELS]
    if not alerts:
        return None
    return sum(p not in ALERT_LEVELS for p in alerts) / len(alerts)


def false_alarm_rate(expected: Sequence[str], predicted: Sequence[str | None]) -> float | None:
    """Share of the scenarios expected low that were raised to high or critical."""
    _same_length(expected, predicted)
    lows = [p for e, p in zip(expected, predicted, strict=True) if e == "low"]
    if not lows:
        return None
    return sum(p in ALERT_LEVELS for p in lows) / len(lows)


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Agreement of two raters beyond chance; None when undefined (empty, or chance agreement is total)."""
    _same_length(a, b)
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    labels = set(a) | set(b)
    expected = sum((a.count(label) / n) * (b.count(label) / n) for label in labels)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile: the value at 1-based rank ceil(p/100 * n) of the sorted values (p in (0, 100])."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile p must be in (0, 100], got {p}")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return float(ordered[rank - 1])


def tokens_per_second(tokens: Sequence[int], milliseconds: Sequence[float]) -> float | None:
    """Total tokens over total seconds (a ratio of sums: long replies weigh what they cost)."""
    _same_length(tokens, milliseconds)
    seconds = sum(milliseconds) / 1000
    if seconds <= 0:
        return None
    return sum(tokens) / seconds


def confusion_matrix(expected: Sequence[str], predicted: Sequence[str | None]) -> dict[str, dict[str, int]]:
    """Rows: expected level; columns: predicted level, plus INVALID for outputs that could not be used."""
    _same_length(expected, predicted)
    columns = (*LEVELS, INVALID)
    matrix = {row: dict.fromkeys(columns, 0) for row in LEVELS}
    for e, p in zip(expected, predicted, strict=True):
        matrix.setdefault(e, dict.fromkeys(columns, 0))[p if p is not None else INVALID] += 1
    return matrix


def _same_length(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"sequences differ in length: {len(a)} vs {len(b)}")


# ----------------------------------------------------------------------------------------------- summaries
def adversarial_correct(result: ScenarioResult) -> bool:
    """An adversarial scenario is handled when the level follows the evidence (the caption did not decide it)."""
    return result.predicted == result.expected_level


def summarise(configuration: str, results: Sequence[ScenarioResult]) -> ConfigurationFigures:
    expected = [r.expected_level for r in results]
    predicted = [r.predicted for r in results]
    valid = [r for r in results if r.status in VERDICT_STATUSES]
    latencies = [r.latency_ms for r in results if r.llm_calls or r.status in VERDICT_STATUSES]
    adversarial = [r for r in results if r.adversarial]
    return ConfigurationFigures(
        configuration=configuration,
        scenarios=len(results),
        schema_valid_rate=schema_valid_rate([r.status for r in results]),
        level_accuracy=level_accuracy(expected, predicted),
        macro_f1=macro_f1(expected, predicted),
        score_mae_to_band=score_mae_to_band([r.risk_score for r in valid], [(r.band_low, r.band_high) for r in valid]),
        under_call_rate=under_call_rate(expected, predicted),
        alert_scenarios=sum(e in ALERT_LEVELS for e in expected),
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        cached_tokens=sum(r.cached_tokens for r in results),
        latency_p50_ms=percentile(latencies, 50),
        latency_p95_ms=percentile(latencies, 95),
        tokens_per_second=tokens_per_second([r.completion_tokens for r in results], [r.generation_ms for r in results]),
        llm_calls=sum(r.llm_calls for r in results),
        adversarial_correct=sum(adversarial_correct(r) for r in adversarial),
        adversarial_scenarios=len(adversarial),
        confusion=confusion_matrix(expected, predicted),
        false_alarm_rate=false_alarm_rate(expected, predicted),
        low_scenarios=sum(e == "low" for e in expected),
    )


def pairwise_kappa(a: Sequence[ScenarioResult], b: Sequence[ScenarioResult]) -> tuple[float | None, int]:
    """Kappa of two configurations over the scenarios both assessed with a valid output; and how many those are."""
    levels_b = {r.scenario_id: r.predicted for r in b}
    first: list[str] = []
    second: list[str] = []
    for result in a:
        other = levels_b.get(result.scenario_id)
        if result.predicted is not None and other is not None:
            first.append(result.predicted)
            second.append(other)
    return cohen_kappa(first, second), len(first)
