"""Token budgeting: fit a batch's prompt into ONE llama-server slot, dropping the least valuable sections first.

- Counting: `core/prompt/tokens.py` (cl100k_base, bundled offline).
- The budget (per slot, from the server's live figure or the settings): `core/prompt/slot_budget.py`.
- Each part of the prompt is counted once and the counts are summed (parts end with a newline, so the sum equals
  a full encode; tested). Removing a section subtracts its count: the whole prompt is never re-encoded per step.
- History sections (`LATE_REMOVAL_ORDER`: cross_camera, then baseline) go after every other removable section and
  only when Florence could not keep `sections.HISTORY_OUTRANKS_FLORENCE_LINES` (2) captioned lines otherwise: a
  baseline or a path across cameras says more than a third caption of the same person (core/context/sections.py).
- Order: whole sections go in `FULL_REMOVAL_ORDER` (defined with the sections in `core/context/sections.py`: the
  reference order, with `clip` placed right before `scene`: CLIP zero-shot classes are a noisy second opinion
  that Florence captions mostly cover, but they are cheaper and more specific than dropping the scene context).
  Removal stops as soon as the prompt fits.
  `florence` and `detections` are never removed: the detections summary is the core evidence and Florence
  captions are the primary visual evidence (the "minimal" quality level keeps only them). When the prompt still
  does not fit after every removable section is gone, both are shortened TOGETHER, keeping the same fraction of
  their lines (at least one each): the most valuable lines first (fast path, person, confidence in 0.1 steps,
  late, exact confidence), the rest summarised as counts per label. The headers of both (counts, confidence,
  zones, tracks and dwell, coverage) stay.
- Past that, so that every batch is still assessed (issue #15 item 10: a night batch of 6 persons with rich
  Florence regions needed 1,890 of 1,888 tokens with CTX_SIZE=8192, PARALLEL=2), `DEGRADATION_ORDER`, one step at a
  time until the prompt fits: Florence down to its header and a count per label, then the detections down to their
  header and counts (the header keeps counts, time, labels, confidence, zones, tracks), then the worked examples of
  the static system message (the instructions, schema and calibration stay), then the detections header down to
  its brief form (who, when, the top labels, confidence). Batch evidence goes before the generic examples, and the
  examples go before the last of the evidence. The static prefix changes only at the third step, so prefix caching
  is untouched in the usual case. What is left after every step is the floor: if even that does not fit,
  PromptTooLarge (its `minimum_tokens` is the floor) and the batch alerts unassessed; `prompt_floor` computes it
  for `hsi config check`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from hsi_dagster.core.context import sections
from hsi_dagster.core.prompt.messages import (
    BLOCK_SUFFIX,
    STATIC_EXAMPLES,
    STATIC_INSTRUCTIONS,
    Section,
    block_prefix,
    render_block,
    render_messages,
    render_profile_block,
    tail_pieces,
)
from hsi_dagster.core.prompt.tokens import TokenCounter

# From the one table of sections (core/context/sections.py): removed whole in this order, cheapest evidence first; the
# sections that are never removed are shortened together instead.
FULL_REMOVAL_ORDER: tuple[str, ...] = sections.FULL_REMOVAL_ORDER
LATE_REMOVAL_ORDER: tuple[str, ...] = sections.LATE_REMOVAL_ORDER  # the history sections (core/context/sections.py)
SHORTEN_ORDER: tuple[str, ...] = sections.NEVER_REMOVED
NEVER_REMOVED = frozenset(SHORTEN_ORDER)
WARN_UTILIZATION = 0.80
FLORENCE_LINES = "florence_lines"  # Florence down to its header and a count of captioned detections per label
DETECTION_LINES = "detection_lines"  # the detections down to their header and a count per label
WORKED_EXAMPLES = "worked_examples"  # the static system message without its worked examples
DETECTION_DETAILS = "detection_details"  # the detections header down to its brief form (the floor)
DEGRADATION_ORDER: tuple[str, ...] = (FLORENCE_LINES, DETECTION_LINES, WORKED_EXAMPLES, DETECTION_DETAILS)


class PromptTooLarge(ValueError):
    """Even the floor (every section removal, shortening and DEGRADATION_ORDER step taken) exceeds the budget;
    `minimum_tokens` is the floor."""

    def __init__(self, message: str, *, batch_id: str | None, budget: int, minimum_tokens: int):
        super().__init__(message)
        self.batch_id = batch_id
        self.budget = budget
        self.minimum_tokens = minimum_tokens


@dataclass
class BudgetedPrompt:
    messages: list[dict]
    tokens_before: int
    tokens_after: int  # cl100k estimate incl. per-message overhead
    budget: int
    utilization: float
    sections_removed: list[str]
    detections_shortened: bool
    warning: str | None
    static_prefix: str
    sections_shortened: list[str] = field(default_factory=list)
    static_tokens: int = 0
    degraded: list[str] = field(default_factory=list)  # DEGRADATION_ORDER steps taken, in order


class _Part:
    """A section and its token count. A shortenable section is encoded once; the per-line counts needed to
    shorten it are derived from that one encoding (token byte lengths split at line ends), only when needed."""

    def __init__(self, section: Section, counter: TokenCounter):
        self.section = section
        self.original = section
        self.counter = counter
        if section.items:
            self._ids = counter.encode_counted(render_block(section))
            self.tokens = len(self._ids)
        else:
            self.tokens = counter.count(render_block(section))
        self._prepared = False

    def _prepare(self) -> None:
        if self._prepared:
            return
        section = self.section
        pieces = [block_prefix(section), section.head, *(item.line for item in section.items), BLOCK_SUFFIX]
        counts = self.counter.split_counts(self._ids, pieces)
        self.frame = counts[0] + counts[1] + counts[-1]
        line_tokens = counts[2:-1]
        self.order = section.rank_order()
        self.cumulative = [0]
        for i in self.order:
            self.cumulative.append(self.cumulative[-1] + line_tokens[i])
        self._prepared = True

    def cost(self, keep: int) -> int:
        """Tokens of the block keeping the `keep` best lines plus the one-line summary of the rest."""
        self._prepare()
        omitted = [self.section.items[i] for i in self.order[keep:]]
        return self.frame + self.cumulative[keep] + self.counter.count(self.section.omission_line(omitted))

    def keep_for(self, step: int, steps: int) -> int:
        """Lines kept at `step` of `steps` (same fraction for every shortened section, at least one line)."""
        n = len(self.section.items)
        return min(n, max(1, math.ceil(n * step / steps)))

    def apply(self, keep: int) -> None:
        self.tokens = self.cost(keep)
        self.section = self.section.shortened(keep, self.order)

    def headers_only(self, *, brief: bool = False) -> None:
        """Down to the head and counts (DEGRADATION_ORDER), from the section as built."""
        self.section = self.original.headers_only(brief=brief)
        self.tokens = self.counter.count(render_block(self.section))


def _shorten_jointly(parts: list[_Part], allowance: int) -> None:
    """Keep the same fraction of lines in each part (best lines first), as many as fit in `allowance` tokens."""
    steps = max(len(p.section.items) for p in parts)

    def cost(step: int) -> int:
        return sum(p.cost(p.keep_for(step, steps)) for p in parts)

    lo, hi = 0, steps - 1  # `steps` (everything kept) already failed
    while lo < hi:  # largest step that fits (cost grows with step; the summary line varies by a token or two)
        mid = (lo + hi + 1) // 2
        if cost(mid) <= allowance:
            lo = mid
        else:
            hi = mid - 1
    for part in parts:
        part.apply(part.keep_for(lo, steps))


def _fits_keeping_florence(shortenable: list[_Part], allowance: int) -> bool:
    """Whether the shortenable sections fit `allowance` with Florence still holding its protected lines
    (sections.HISTORY_OUTRANKS_FLORENCE_LINES; the detections keep the same fraction, at least one line)."""
    if not shortenable:
        return False
    steps = max(len(p.section.items) for p in shortenable)
    florence = next((p for p in shortenable if p.section.key == "florence"), None)
    step = 0
    if florence is not None:
        wanted = min(len(florence.section.items), sections.HISTORY_OUTRANKS_FLORENCE_LINES)
        step = next(s for s in range(steps + 1) if florence.keep_for(s, steps) >= wanted)
    return sum(p.cost(p.keep_for(step, steps)) for p in shortenable) <= allowance


def fit_to_budget(
    sections: Sequence[Section],
    camera_profile_text: str,
    budget: int,
    counter: TokenCounter,
    *,
    batch_id: str | None = None,
    static: tuple[str, str] | None = None,
) -> BudgetedPrompt:
    """Remove whole sections (FULL_REMOVAL_ORDER) until the prompt fits, then shorten florence and detections, then
    degrade step by step (DEGRADATION_ORDER); PromptTooLarge only when the floor does not fit. `static`: the
    (instructions, worked examples) of the output schema (core.prompt.messages.static_prompt); default the default
    schema's."""
    if budget <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    instructions, examples = static or (STATIC_INSTRUCTIONS, STATIC_EXAMPLES)
    system = instructions + examples
    static_tokens = counter.count_static(system)
    overhead = 2 * counter.MESSAGE_OVERHEAD + counter.REPLY_PRIMING
    profile_tokens = counter.count(render_profile_block(camera_profile_text))
    parts = {section.key: _Part(section, counter) for section in sections}
    if len(parts) != len(sections):
        raise ValueError("duplicate section keys")
    removed: list[str] = []
    shortened: list[str] = []
    degraded: list[str] = []

    def total() -> int:
        return (
            overhead
            + static_tokens
            + profile_tokens
            + sum(p.tokens for p in parts.values())
            + sum(counter.count(t) for t in tail_pieces(removed))
        )

    current = before = total()
    for key in FULL_REMOVAL_ORDER:
        if current <= budget:
            break
        if key in parts:
            del parts[key]
            removed.append(key)
            current = total()
    shortenable = [parts[key] for key in SHORTEN_ORDER if key in parts and parts[key].section.items]
    for key in LATE_REMOVAL_ORDER:  # history: kept while Florence can keep its protected lines
        if current <= budget or key not in parts:
            continue
        if _fits_keeping_florence(shortenable, budget - (current - sum(p.tokens for p in shortenable))):
            break
        del parts[key]
        removed.append(key)
        current = total()
    if current > budget and shortenable:
        _shorten_jointly(shortenable, budget - (current - sum(p.tokens for p in shortenable)))
        shortened = [p.section.key for p in shortenable if p.section.omitted]
        current = total()
    for step in DEGRADATION_ORDER:
        if current <= budget:
            break
        if step == WORKED_EXAMPLES:
            system = instructions
            static_tokens = counter.count_static(system)
        else:
            key = "florence" if step == FLORENCE_LINES else "detections"
            part = parts.get(key)
            if part is None or not (part.original.items or step == DETECTION_DETAILS and part.original.brief_head):
                continue
            part.headers_only(brief=step == DETECTION_DETAILS)
            if key not in shortened:
                shortened.append(key)
        degraded.append(step)
        current = total()
    label = f"batch {batch_id}" if batch_id else "prompt"
    if current > budget:
        raise PromptTooLarge(
            f"{label} cannot fit its budget even at its floor: at least {current} tokens (static part "
            f"{static_tokens}, {before} before removing {removed or 'nothing'}, shortening {shortened or 'nothing'} "
            f"and degrading {degraded or 'nothing'}) > budget {budget}; raise CTX_SIZE or lower PARALLEL, "
            "NEMOTRON_MAX_OUTPUT_TOKENS or PROMPT_SAFETY_MARGIN_TOKENS (`hsi config check` computes the floor)",
            batch_id=batch_id,
            budget=budget,
            minimum_tokens=current,
        )
    kept = [p.section for p in parts.values()]
    messages = render_messages(kept, camera_profile_text, removed=removed, system=system)
    utilization = current / budget
    warning = (
        f"{label}: context utilization {utilization:.0%} ({current} of {budget} tokens) is at or above "
        f"{WARN_UTILIZATION:.0%}"
        + (f"; removed {', '.join(removed)}" if removed else "")
        + (f"; degraded {', '.join(degraded)}" if degraded else "")
        if utilization >= WARN_UTILIZATION
        else None
    )
    return BudgetedPrompt(
        messages=messages,
        tokens_before=before,
        tokens_after=current,
        budget=budget,
        utilization=utilization,
        sections_removed=removed,
        detections_shortened="detections" in shortened,
        warning=warning,
        static_prefix=system,
        sections_shortened=shortened,
        static_tokens=static_tokens,
        degraded=degraded,
    )


def prompt_floor(
    sections: Sequence[Section],
    camera_profile_text: str,
    counter: TokenCounter,
    *,
    static: tuple[str, str] | None = None,
) -> int:
    """Tokens of the prompt's floor for these sections and output schema (`static`, as for `fit_to_budget`): every
    removal, shortening and degradation step taken (what `fit_to_budget` sends when nothing more can go)."""
    try:
        fitted = fit_to_budget(sections, camera_profile_text, 1, counter, static=static)
    except PromptTooLarge as exc:
        return exc.minimum_tokens
    return fitted.tokens_after  # pragma: no cover - a prompt of one token
