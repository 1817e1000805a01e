"""The trust sweep: what every trust value 0-3 would have stored, from the model's and the floor's stored scores.

No model call: one evaluation pass keeps, per scenario, the model's own verdict score and the evidence floor's
(evaluation_results.model_score / floor_score), and `final_verdict` is arithmetic on those. Per trust value:
- recall: share of the scenarios expected high or critical stored high or critical (no usable reply counts as the
  floor's verdict, or none when the floor alone does not stand: a miss);
- false-alarm rate: share of the harmless scenarios (expected low) stored high or critical;
- raise precision: of the verdicts the trust let the model raise above the floor's level, the share that did not
  overshoot the label (stored level <= expected level); None when the model raised nothing;
- level accuracy: share of scenarios stored at their expected level.
The recommended trust is the highest the model earned on the holdout split: false alarms within FALSE_ALARM_GOAL (or
within the floor's own rate at trust 0 when the rules alone already exceed it: the model adds none there), and a gain
over trust 0 in recall or level accuracy (a model that never raises a verdict the right way earns nothing). Too few
harmless scenarios to measure a rate: no recommendation, the stated default applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hsi_dagster.core.prompt.risk_schema import RISK_LEVELS, level_for_score
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.final import final_verdict
from hsi_dagster.core.verdict.trust import FALSE_ALARM_GOAL, TRUST_VALUES

ALERT_LEVELS = ("high", "critical")


@dataclass(frozen=True)
class TrustSample:
    """One scenario of a pass: its label and the two stored scores."""

    scenario_id: str
    expected_level: str
    model_score: int | None
    floor_score: int


@dataclass(frozen=True)
class TrustPoint:
    trust: int
    scenarios: int
    recall: float | None
    false_alarm_rate: float | None
    raise_precision: float | None
    raised: int  # verdicts stored above the floor's level
    level_accuracy: float | None

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def _stored_level(sample: TrustSample, trust: int) -> tuple[str | None, bool]:
    """The level production would store at `trust` (None: no verdict), and whether the model raised it."""
    floor = Floor(sample.floor_score, level_for_score(sample.floor_score), (), ())
    verdict = final_verdict(sample.model_score, floor, trust)
    if not verdict.stands:
        return None, False
    return verdict.level, RISK_LEVELS.index(verdict.level) > RISK_LEVELS.index(floor.level)


def _share(hits: int, total: int) -> float | None:
    return hits / total if total else None


def trust_point(samples: Sequence[TrustSample], trust: int) -> TrustPoint:
    stored = [(sample, *_stored_level(sample, trust)) for sample in samples]
    alerts = [level for sample, level, _ in stored if sample.expected_level in ALERT_LEVELS]
    lows = [level for sample, level, _ in stored if sample.expected_level == "low"]
    raises = [(sample, level) for sample, level, raised in stored if raised and level is not None]
    precise = sum(RISK_LEVELS.index(level) <= RISK_LEVELS.index(sample.expected_level) for sample, level in raises)
    return TrustPoint(
        trust=trust,
        scenarios=len(samples),
        recall=_share(sum(level in ALERT_LEVELS for level in alerts), len(alerts)),
        false_alarm_rate=_share(sum(level in ALERT_LEVELS for level in lows), len(lows)),
        raise_precision=_share(precise, len(raises)),
        raised=len(raises),
        level_accuracy=_share(sum(level == sample.expected_level for sample, level, _ in stored), len(stored)),
    )


def trust_sweep(samples: Sequence[TrustSample]) -> list[TrustPoint]:
    """One point per trust value 0-3."""
    return [trust_point(samples, trust) for trust in TRUST_VALUES]


def _gains(point: TrustPoint, base: TrustPoint) -> bool:
    """Whether `point` catches more than the rules alone (recall) or stores more levels right (level accuracy)."""
    better_recall = (point.recall or 0.0) > (base.recall or 0.0) + 1e-12
    better_levels = (point.level_accuracy or 0.0) > (base.level_accuracy or 0.0) + 1e-12
    return better_recall or better_levels


def recommended_trust(points: Sequence[TrustPoint], goal: float = FALSE_ALARM_GOAL) -> int | None:
    """The highest trust the model earned: its false-alarm rate stays within `goal` (or the rules' own rate at trust 0
    when that is already above it) AND it catches more (recall) or stores more levels right than trust 0. A model
    whose answers never move a verdict the right way (SmolLM2 answering "8" everywhere) earns 0, however few false
    alarms it makes: a clean sheet without a single correct raise measures nothing. None when no harmless scenario was
    measured."""
    by_trust = {point.trust: point for point in points}
    base = by_trust.get(0)
    if base is None or base.false_alarm_rate is None:
        return None
    allowed = max(goal, base.false_alarm_rate)
    earned = [
        point.trust
        for point in points
        if point.trust > 0
        and point.false_alarm_rate is not None
        and point.false_alarm_rate <= allowed + 1e-12
        and _gains(point, base)
    ]
    return max(earned, default=0)


# The household's corrected batches measure the trust too (`hsi eval --household` with a model), once there are enough
# of them to measure anything: a false-alarm rate needs harmless batches (with 10, one false alarm is 10 %, already
# over the 3 % goal, so a model that raises one harmless batch of this household earns nothing), a recall gain needs
# threats, and 30 in all keeps one odd week from deciding. Below these, the labeled set's measurement stands.
HOUSEHOLD_MIN_BATCHES = 30
HOUSEHOLD_MIN_HARMLESS = 10
HOUSEHOLD_MIN_THREATS = 3


def household_shortfall(samples: Sequence[TrustSample]) -> str | None:
    """Why the household's corrected batches do not yet measure a trust (None: they do)."""
    harmless = sum(sample.expected_level == "low" for sample in samples)
    threats = sum(sample.expected_level in ALERT_LEVELS for sample in samples)
    enough = len(samples) >= HOUSEHOLD_MIN_BATCHES
    if enough and harmless >= HOUSEHOLD_MIN_HARMLESS and threats >= HOUSEHOLD_MIN_THREATS:
        return None
    return (
        f"{len(samples)} corrected batches ({harmless} harmless, {threats} high or critical); a household measurement "
        f"needs {HOUSEHOLD_MIN_BATCHES} ({HOUSEHOLD_MIN_HARMLESS} harmless, {HOUSEHOLD_MIN_THREATS} high or critical)"
    )
