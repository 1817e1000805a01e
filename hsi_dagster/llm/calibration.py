"""How far the cl100k estimate is from the served model's real prompt tokens, and the margin that covers it.

`calibrate(count_exact, prompts, counter)` counts each prompt twice: the estimate `fit_to_budget` uses
(cl100k through `TokenCounter.count_messages`, incl. its per-message overhead) and the exact count from the
served model (`count_exact`, e.g. the LLM client's `/apply-template` + `/tokenize`, chat template included).

How the margin is derived: the budget is expressed in estimated tokens, but the slot holds real tokens. With
r = max(exact / estimate) over the calibration prompts, times a 3 % headroom for prompts unlike them, a prompt of
B estimated tokens needs up to r*B real tokens, and r*B <= slot_context - max_output_tokens requires
B <= (slot_context - max_output_tokens) / r. Since B = slot_context - max_output_tokens - margin:

    margin = ceil((slot_context - max_output_tokens) * (1 - 1 / r)), rounded up to a multiple of 32, >= 0

(if the estimate overcounts, r <= 1 and no margin is needed). Set PROMPT_SAFETY_MARGIN_TOKENS to it.
The margin grows with the slot because the error is proportional, not fixed: calibrate per model and slot size.

The prompts to calibrate over come from `hsi_dagster.synthetic.batches.calibration_prompts` (seeded, varied).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hsi_dagster.core.prompt.tokens import TokenCounter

RATIO_HEADROOM = 1.03
MARGIN_STEP = 32


@dataclass(frozen=True)
class CalibrationRow:
    index: int
    estimate: int
    exact: int

    @property
    def ratio(self) -> float:
        return self.exact / self.estimate if self.estimate else float("inf")


@dataclass
class CalibrationReport:
    rows: list[CalibrationRow]
    max_ratio: float
    median_ratio: float
    min_ratio: float
    slot_context: int | None = None
    max_output_tokens: int | None = None
    suggested_margin: int | None = None
    notes: list[str] = field(default_factory=list)

    def margin_for(self, slot_context: int, max_output_tokens: int) -> int:
        return margin_for_ratio(self.max_ratio, slot_context, max_output_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompts": len(self.rows),
            "max_ratio": round(self.max_ratio, 4),
            "median_ratio": round(self.median_ratio, 4),
            "min_ratio": round(self.min_ratio, 4),
            "slot_context": self.slot_context,
            "max_output_tokens": self.max_output_tokens,
            "suggested_margin": self.suggested_margin,
            "rows": [
                {"index": r.index, "estimate": r.estimate, "exact": r.exact, "ratio": round(r.ratio, 4)}
                for r in self.rows
            ],
        }


def margin_for_ratio(max_ratio: float, slot_context: int, max_output_tokens: int) -> int:
    """The safety margin (tokens) that keeps r_max * budget within slot_context - max_output_tokens."""
    room = slot_context - max_output_tokens
    ratio = max_ratio * RATIO_HEADROOM
    if room <= 0 or ratio <= 1.0:
        return 0
    margin = math.ceil(room * (1.0 - 1.0 / ratio))
    return int(math.ceil(margin / MARGIN_STEP) * MARGIN_STEP)


def calibrate(
    count_exact: Callable[[list[dict]], int],
    prompts: Sequence[list[dict]],
    counter: TokenCounter,
    *,
    slot_context: int | None = None,
    max_output_tokens: int | None = None,
) -> CalibrationReport:
    """Estimate vs exact token counts per prompt; the ratios and (given the slot) the margin they imply."""
    if not prompts:
        raise ValueError("calibrate needs at least one prompt")
    rows = [CalibrationRow(i, counter.count_messages(p), int(count_exact(p))) for i, p in enumerate(prompts)]
    ratios = [r.ratio for r in rows]
    report = CalibrationReport(
        rows, max(ratios), statistics.median(ratios), min(ratios), slot_context, max_output_tokens
    )
    if slot_context is not None and max_output_tokens is not None:
        report.suggested_margin = report.margin_for(slot_context, max_output_tokens)
    if max(ratios) > 1.5:
        report.notes.append("the served tokenizer counts over 1.5x cl100k: budgets will be cut hard; check the model")
    return report
