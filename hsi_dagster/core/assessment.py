"""The call-and-repair loop of a risk assessment, written against a plain callable (messages -> reply).

One call with the budgeted messages. If the reply cannot be used (no JSON object, or a required field missing:
see `core.risk.parse_assessment`), ONE repair call: the same conversation (so the server reuses its cached prefix)
plus the bad reply and what was wrong with it. If that fails too, the batch is stored as `invalid_output` with the
last reply: a model that cannot answer twice will not answer a third time, and the run must not hang on it.
Errors of the call itself (server down, prompt rejected) are the caller's: they propagate unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from hsi_dagster.core.risk import ParsedAssessment, parse_assessment, repair_messages

OK = "ok"
INVALID_OUTPUT = "invalid_output"


class Reply(Protocol):
    @property
    def content(self) -> str: ...


R = TypeVar("R", bound=Reply)


@dataclass
class AssessmentOutcome(Generic[R]):
    parsed: ParsedAssessment  # the parse that counts: the repair's when the first reply could not be used
    replies: list[R] = field(default_factory=list)  # every call's reply, in order (1 or 2)

    @property
    def ok(self) -> bool:
        return self.parsed.ok

    @property
    def repaired(self) -> bool:
        return len(self.replies) > 1

    def fields(self) -> dict[str, Any]:
        """The risk_assessments columns that come from the model's reply."""
        raw = self.replies[-1].content
        if not self.parsed.ok or self.parsed.assessment is None:
            return {"status": INVALID_OUTPUT, "error": self.parsed.error, "raw_output": raw}
        assessment = self.parsed.assessment
        return {
            "status": OK,
            "risk_score": assessment.risk_score,
            "risk_level": assessment.risk_level,
            "model_risk_level": self.parsed.model_level,
            "summary": assessment.summary,
            "reasoning": assessment.reasoning,
            # Absent optional fields are left out, not null: the stored object matches the schema sent to the server.
            "assessment": assessment.model_dump(mode="json", exclude_none=True),
            "raw_output": raw,
            "error": "; ".join(self.parsed.warnings) or None,
        }


def assess(messages: list[dict], call: Callable[[list[dict]], R]) -> AssessmentOutcome[R]:
    """Call, and repair once if the reply cannot be used."""
    first = call(messages)
    parsed = parse_assessment(first.content)
    if parsed.ok:
        return AssessmentOutcome(parsed, [first])
    second = call(repair_messages(messages, first.content, parsed.error or "invalid output"))
    repaired = parse_assessment(second.content)
    if not repaired.ok:
        repaired.error = f"{repaired.error} (after one repair; the first reply: {parsed.error})"
    return AssessmentOutcome(repaired, [first, second])
