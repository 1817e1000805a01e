"""The trust sweep (core/evaluation/trust_sweep.py): each trust 0-3 recomputed from stored model and floor scores,
and the recommended trust: the highest whose false alarms stay within the goal."""

from __future__ import annotations

import pytest

from hsi_dagster.core.evaluation.trust_sweep import TrustSample, recommended_trust, trust_point, trust_sweep


def sample(n: int, expected: str, model: int | None, floor: int) -> TrustSample:
    return TrustSample(f"s{n}", expected, model, floor)


# A crowbar only the model saw, a knife the rules saw, a cat the model called critical, a quiet delivery, and a
# medium loiterer the model pushed to critical.
SAMPLES = [
    sample(1, "critical", 92, 0),
    sample(2, "critical", 10, 90),
    sample(3, "low", 93, 0),
    sample(4, "low", 5, 0),
    sample(5, "medium", 90, 45),
]


def test_each_trust_is_the_arithmetic_of_the_stored_scores():
    points = {p.trust: p for p in trust_sweep(SAMPLES)}
    # trust 0: the floor's levels; the crowbar is missed, nothing raised above the floor's level
    assert (points[0].recall, points[0].false_alarm_rate, points[0].raised, points[0].raise_precision) == (
        0.5,
        0.0,
        0,
        None,
    )
    assert points[0].level_accuracy == pytest.approx(4 / 5)
    # trust 1: low -> medium at most: crowbar and cat medium, the loiterer high (above its label)
    assert (points[1].recall, points[1].false_alarm_rate, points[1].raised) == (0.5, 0.0, 3)
    assert points[1].raise_precision == pytest.approx(1 / 3)  # only the crowbar's raise is not above its label
    # trust 2: the crowbar and the cat alert (high)
    assert (points[2].recall, points[2].false_alarm_rate) == (1.0, 0.5)
    # trust 3: the model's own scores where they are higher
    assert (points[3].recall, points[3].false_alarm_rate, points[3].raised) == (1.0, 0.5, 3)
    assert points[3].level_accuracy == pytest.approx(3 / 5)


def test_no_usable_reply_is_the_floors_verdict_or_none_at_every_trust():
    for trust in range(4):
        point = trust_point([sample(1, "critical", None, 90), sample(2, "high", None, 0)], trust)
        assert point.recall == 0.5 and point.raised == 0  # the silent batch has no verdict: a miss


def test_the_recommendation_is_the_highest_trust_within_the_false_alarm_goal():
    harmless = [sample(100 + n, "low", 5, 0) for n in range(40)]
    one_cat = [*harmless, sample(1, "low", 93, 0), sample(2, "critical", 92, 0)]  # 1 of 41 harmless raised: 2.4 %
    assert recommended_trust(trust_sweep(one_cat)) == 3  # and the crowbar only the model saw is caught
    two_cats = [*one_cat, sample(3, "low", 70, 0)]  # trust 2: 2 of 42 (4.8 %); trust 1: none alert, but ...
    assert recommended_trust(trust_sweep(two_cats)) == 0  # ... at trust 1 it only moves levels the wrong way
    medium = [*two_cats, *[sample(200 + n, "medium", 50, 0) for n in range(3)]]  # three mediums only it saw
    assert recommended_trust(trust_sweep(medium)) == 1  # now trust 1 stores more levels right
    assert recommended_trust(trust_sweep(SAMPLES)) == 0  # the cat alerts from trust 2 on: 1 of 2 harmless


def test_a_model_that_never_moves_a_verdict_the_right_way_earns_nothing():
    """SmolLM2 answering "8" to everything makes no false alarm at any trust, and earns no trust either."""
    always_low = [sample(n, "low", 8, 0) for n in range(30)] + [sample(50, "high", 8, 70), sample(51, "medium", 8, 0)]
    points = trust_sweep(always_low)
    assert all(point.false_alarm_rate == 0.0 for point in points)
    assert recommended_trust(points) == 0


def test_the_rules_own_false_alarms_do_not_count_against_the_model():
    noisy_floor = [sample(1, "low", 5, 70), *[sample(10 + n, "low", 5, 0) for n in range(9)]]  # floor alone: 10 %
    caught = [*noisy_floor, sample(3, "high", 80, 0)]  # a burglar only the model saw
    assert recommended_trust(trust_sweep(caught)) == 3
    # a cat the model calls critical alerts from trust 2 on (2 of 11 harmless, above the rules' own 1 of 11), and at
    # trust 1 the burglar and the cat are both medium: no level moved the right way
    assert recommended_trust(trust_sweep([*caught, sample(2, "low", 93, 0)])) == 0


def test_no_harmless_scenario_measured_gives_no_recommendation():
    assert recommended_trust(trust_sweep([sample(1, "critical", 92, 0)])) is None
    assert recommended_trust([]) is None


def test_the_household_measures_a_trust_only_with_enough_corrections_of_both_kinds() -> None:
    from hsi_dagster.core.evaluation.trust_sweep import household_shortfall

    def samples(harmless: int, threats: int, medium: int = 0) -> list[TrustSample]:
        levels = ["low"] * harmless + ["high"] * threats + ["medium"] * medium
        return [TrustSample(f"b{n}", level, 10, 0) for n, level in enumerate(levels)]

    assert household_shortfall(samples(10, 3, 17)) is None
    assert household_shortfall(samples(27, 3)) is None
    assert household_shortfall(samples(10, 3, 16)) is not None  # 29 in all
    assert household_shortfall(samples(9, 3, 18)) == (
        "30 corrected batches (9 harmless, 3 high or critical); a household measurement needs 30 (10 harmless, "
        "3 high or critical)"
    )
    assert household_shortfall(samples(28, 2)) is not None  # no recall to measure
