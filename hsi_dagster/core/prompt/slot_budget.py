"""How many prompt tokens one batch may use: the budget, not the fitting (that is core/prompt/budget.py).

The budget is per SLOT: llama-server splits CTX_SIZE evenly over PARALLEL slots (no --kv-unified), so with 32,768 /
2 slots a slot holds 16,384 tokens and the budget is 16,384 - 1,536 - margin, never 32,768 - 1,536 = 31,232.
`slot_context` is the one computation of that split (the settings' check, the llama-server options and the
pipeline's budget all call it); `choose_budget` takes the slot size the server reports (/props) when it answers, else
the configured one, and divides the budget by the calibrated token ratio for the cl100k estimates the prompt is
fitted with. The live figure comes in as a value: asking the server is the caller's business.

This module imports nothing, so settings.py (importable with pydantic only, the llama-server image) can use it.
"""

from __future__ import annotations

from dataclasses import dataclass

LIVE_BUDGET_SOURCE = "server /props per-slot n_ctx"
SETTINGS_BUDGET_SOURCE = "settings CTX_SIZE / PARALLEL"


def slot_context(ctx_size: int, parallel: int) -> int:
    """Tokens one slot holds: CTX_SIZE / PARALLEL, rounded down, as llama-server splits its context."""
    return ctx_size // parallel


def prompt_budget(slot_context: int, max_output_tokens: int, safety_margin: int) -> int:
    """Prompt tokens that fit one slot: per-slot context - output reserve - safety margin (must be positive)."""
    budget = slot_context - max_output_tokens - safety_margin
    if budget <= 0:
        raise ValueError(
            f"per-slot context {slot_context} leaves no prompt room after {max_output_tokens} output tokens "
            f"and a {safety_margin}-token margin"
        )
    return budget


@dataclass(frozen=True)
class BudgetChoice:
    slot_context: int  # tokens per server slot the budget is taken from
    source: str  # LIVE_BUDGET_SOURCE or SETTINGS_BUDGET_SOURCE
    budget: int  # prompt tokens of the SERVED model: slot - output reserve - margin
    estimate_budget: int  # the same budget in cl100k estimates (budget / token_ratio), what fit_to_budget fits to
    token_ratio: float  # served-model tokens per cl100k token (PROMPT_TOKEN_RATIO)


def choose_budget(
    live_slot_context: int | None,
    *,
    configured_slot_context: int,
    max_output_tokens: int,
    safety_margin: int,
    token_ratio: float,
) -> BudgetChoice:
    """The prompt budget of one batch.

    The server's own per-slot context when it answered (`live_slot_context`, e.g. from /props; None or 0 when it
    did not): that is what the prompt must fit, whatever the settings say. Otherwise the configured CTX_SIZE /
    PARALLEL. The budget is in tokens of the served model; prompts are counted with cl100k, so the budget they are
    fitted to is divided by the calibrated ratio (a ratio of 1.22 means the served model needs 22 % more tokens than
    cl100k for the same text).
    """
    if token_ratio <= 0:
        raise ValueError(f"token ratio must be positive, got {token_ratio}")
    if live_slot_context is not None and live_slot_context > 0:
        slot, source = live_slot_context, LIVE_BUDGET_SOURCE
    else:
        slot, source = configured_slot_context, SETTINGS_BUDGET_SOURCE
    budget = prompt_budget(slot, max_output_tokens, safety_margin)
    return BudgetChoice(slot, source, budget, int(budget / token_ratio), token_ratio)
