"""Token calibration: the ratio of exact to estimated tokens, and the safety margin it implies."""

from __future__ import annotations

import pytest

from hsi_dagster.core.prompt.messages import STATIC_SYSTEM_PROMPT
from hsi_dagster.core.prompt.slot_budget import prompt_budget
from hsi_dagster.core.prompt.tokens import TokenCounter
from hsi_dagster.llm.calibration import calibrate, margin_for_ratio
from hsi_dagster.synthetic.batches import calibration_prompts


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_calibration_ratio_and_margin(counter):
    prompts = calibration_prompts(6)
    assert len({p[1]["content"] for p in prompts}) == 6 and all(
        p[0]["content"] == STATIC_SYSTEM_PROMPT for p in prompts
    )
    report = calibrate(
        lambda m: int(counter.count_messages(m) * 1.25), prompts, counter, slot_context=16_384, max_output_tokens=1_536
    )
    assert report.max_ratio == pytest.approx(1.25, abs=0.01) and report.median_ratio == pytest.approx(1.25, abs=0.01)
    # 14,848 * (1 - 1 / (1.25 * 1.03)) = 3,316 -> 3,328 (multiple of 32)
    assert report.suggested_margin == margin_for_ratio(report.max_ratio, 16_384, 1_536) == 3_328
    budget = prompt_budget(16_384, 1_536, report.suggested_margin)
    assert budget * report.max_ratio <= 16_384 - 1_536
    assert margin_for_ratio(0.9, 16_384, 1_536) == 0


def test_calibrate_refuses_an_empty_prompt_set(counter):
    with pytest.raises(ValueError, match="at least one prompt"):
        calibrate(lambda m: 1, [], counter)
